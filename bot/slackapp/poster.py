"""Posts the runtime's outcomes into their Slack threads (the runtime's `on_outcome` sink).
A post that still fails after slack_sdk's retries raises: the runtime then keeps the thread
undelivered, and the recovery sweep posts it again; no conversation state is lost."""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import metrics
from bot.runtime.outcomes import (
    Answer,
    ApprovalRequest,
    Decided,
    Notice,
    NoticeKind,
    Outcome,
)
from bot.slackapp.blocks import approval_blocks, decided_blocks, split_text, truncate

log = logging.getLogger(__name__)
NOTICE_ICONS = {
    NoticeKind.RESUMED_AFTER_RESTART: ":arrows_counterclockwise:",
    NoticeKind.STATE_EXPIRED: ":hourglass:",
    NoticeKind.STATE_INCOMPATIBLE: ":warning:",
    NoticeKind.STATE_DAMAGED: ":warning:",
    NoticeKind.TOOL_OUTCOME_UNKNOWN: ":grey_question:",
    NoticeKind.DISCARDED: ":wastebasket:",
    NoticeKind.RUN_FAILED: ":x:",
    NoticeKind.MESSAGE_KEPT: ":inbox_tray:",
}


class SlackPoster:
    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client

    async def __call__(self, outcome: Outcome) -> None:
        metrics.OUTCOMES.labels(type(outcome).__name__).inc()
        try:
            await self._post(outcome)
        except SlackApiError as exc:
            metrics.DELIVERY_FAILURES.inc()
            log.error("posting %s to %s failed: %s", type(outcome).__name__, outcome.key, exc)
            raise

    async def _post(self, outcome: Outcome) -> None:
        channel, thread_ts = outcome.key.channel, outcome.key.thread_ts
        if isinstance(outcome, Answer):
            for piece in split_text(outcome.text or "(no answer)"):
                await self.client.chat_postMessage(
                    channel=channel, thread_ts=thread_ts, text=piece, unfurl_links=False
                )
        elif isinstance(outcome, ApprovalRequest):
            for call in outcome.calls:
                await self.client.chat_postMessage(
                    channel=channel,
                    thread_ts=thread_ts,
                    text=f"Approval needed: {call.tool_name}",
                    blocks=approval_blocks(outcome, call),
                )
        elif isinstance(outcome, Notice) and outcome.kind is not NoticeKind.QUEUED:
            metrics.NOTICES.labels(outcome.kind.value).inc()
            icon = NOTICE_ICONS.get(outcome.kind, ":information_source:")
            await self.client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=truncate(f"{icon} {outcome.text}", 3900)
            )
        elif isinstance(outcome, Decided):
            if outcome.request_message:
                await self._replace_buttons(outcome, outcome.request_message)
            verdict = "approved" if outcome.approved else "rejected"
            reason = f": {outcome.reason}" if outcome.reason else ""
            await self.client.chat_postMessage(
                channel=channel,
                thread_ts=thread_ts,
                text=truncate(
                    f"`{outcome.tool_name}` {verdict} by <@{outcome.user}>{reason}", 3900
                ),
            )
        # Refused, Status, Duplicate and Discarded answer one request: the listener shows them.

    async def _replace_buttons(self, decided: Decided, request_message: str) -> None:
        channel, _, ts = request_message.partition(":")
        try:
            await self.client.chat_update(
                channel=channel,
                ts=ts,
                text=f"{decided.tool_name}: {'approved' if decided.approved else 'rejected'}",
                blocks=decided_blocks(decided),
            )
        except SlackApiError as exc:  # the decision stands; only the old buttons remain
            log.error("%s: replacing approval buttons failed: %s", decided.key, exc)
