"""Posts the runtime's outcomes into their Slack threads (the runtime's outcome sink).

Every post of a recorded outcome carries Slack message metadata naming it (`agent_outcome`,
its outbox id and part), so that a redelivery after a crash or a lost answer first looks in
the thread and posts only what is not there: nothing is posted twice. Failures are sorted for
the runtime: permanent Slack errors (the bot left the channel, the message is invalid, the
token was revoked) are not retried; anything else is, later, with backoff. Approval requests
decided by a reply, or set aside, get their buttons replaced like clicked ones."""

from __future__ import annotations

import logging
import time
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot import metrics
from bot.runtime import (
    Answer,
    ApprovalRequest,
    Decided,
    DeliveryFailed,
    DeliveryRef,
    Notice,
    NoticeKind,
    Outcome,
    Refused,
    StatusReply,
)
from bot.slackapp.blocks import approval_blocks, decided_blocks, set_aside_blocks
from bot.slackapp.text import MESSAGE_LIMIT, escape, split_text, truncate

log = logging.getLogger(__name__)
EVENT_TYPE = "agent_outcome"
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
# Errors that retrying cannot fix (https://api.slack.com/methods/chat.postMessage#errors).
PERMANENT_ERRORS = frozenset(
    {
        "not_in_channel",
        "channel_not_found",
        "is_archived",
        "msg_too_long",
        "invalid_blocks",
        "invalid_blocks_format",
        "invalid_metadata_format",
        "invalid_metadata_schema",
        "metadata_too_large",
        "no_text",
        "too_many_attachments",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "invalid_auth",
        "not_authed",
        "missing_scope",
        "no_permission",
        "restricted_action",
        "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel",
        "restricted_action_non_threadable_channel",
        "cannot_reply_to_message",
        "team_access_not_granted",
        "ekm_access_denied",
        "message_not_found",
        "invalid_arguments",
    }
)
LOOKUP_SECONDS = 30  # how long a thread's list of posted outcomes is reused


def slack_error(exc: SlackApiError) -> str:
    """Slack's error code, or the HTTP status when the answer was not Slack's JSON."""
    data = exc.response.data
    if isinstance(data, dict) and data.get("error"):
        return str(data["error"])
    return f"http_{exc.response.status_code}"


class SlackPoster:
    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client
        self._posted: dict[tuple[str, str], tuple[float, list[dict[str, Any]]]] = {}

    async def __call__(self, outcome: Outcome, ref: DeliveryRef) -> None:
        metrics.OUTCOMES.labels(type(outcome).__name__).inc()
        try:
            await self._deliver(outcome, ref)
        except SlackApiError as exc:
            reason = slack_error(exc)
            metrics.DELIVERY_FAILURES.labels(reason).inc()
            log.error("posting %s to %s failed: %s", type(outcome).__name__, outcome.key, reason)
            raise DeliveryFailed(reason, permanent=reason in PERMANENT_ERRORS) from exc
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            metrics.DELIVERY_FAILURES.labels("connection").inc()
            log.error("posting %s to %s failed: %r", type(outcome).__name__, outcome.key, exc)
            raise DeliveryFailed(type(exc).__name__, permanent=False) from exc

    async def _deliver(self, outcome: Outcome, ref: DeliveryRef) -> None:
        if isinstance(outcome, Answer):
            text = escape(outcome.text) or "(no answer)"
            for part, piece in enumerate(split_text(text)):
                await self._post(outcome, ref, part, text=piece, unfurl_links=False)
        elif isinstance(outcome, ApprovalRequest):
            for part, call in enumerate(outcome.calls):
                await self._post(
                    outcome,
                    ref,
                    part,
                    text=f"Approval needed: {escape(call.tool_name)}",
                    blocks=approval_blocks(outcome, call),
                    calls=call.call_id,
                )
        elif isinstance(outcome, Notice) and outcome.kind is not NoticeKind.QUEUED:
            metrics.NOTICES.labels(outcome.kind.value).inc()
            icon = NOTICE_ICONS.get(outcome.kind, ":information_source:")
            reference = f" (reference: {outcome.reference})" if outcome.reference else ""
            await self._post(
                outcome, ref, 0, text=truncate(f"{icon} {outcome.text}{reference}", MESSAGE_LIMIT)
            )
            for call in outcome.settles:
                card = await self._find_card(outcome, call.call_id)
                if card:
                    await self._update(
                        card, outcome, set_aside_blocks(call, "Set aside: see below.")
                    )
        elif isinstance(outcome, Decided):
            card = outcome.request_message or await self._find_card(outcome, outcome.call_id)
            if card:
                await self._update(card, outcome, decided_blocks(outcome))
            verdict = "approved" if outcome.approved else "rejected"
            reason = f": {escape(outcome.reason)}" if outcome.reason else ""
            text = f"`{escape(outcome.tool_name)}` {verdict} by <@{outcome.user}>{reason}"
            await self._post(outcome, ref, 0, text=truncate(text, MESSAGE_LIMIT))
        elif isinstance(outcome, Refused | StatusReply):
            await self._answer_privately(outcome)
        # Duplicate and Discarded answer one request: the caller shows them.

    # -- posting, once ------------------------------------------------------------------

    async def _post(
        self,
        outcome: Outcome,
        ref: DeliveryRef,
        part: int,
        *,
        calls: str = "",
        **message: Any,
    ) -> None:
        channel, thread_ts = outcome.key.channel, outcome.key.thread_ts
        if ref.id and ref.maybe_posted and await self._already_posted(outcome, ref.id, part):
            log.info(
                "%s: %s part %d is already in the thread; not posted again",
                outcome.key,
                ref.id,
                part,
            )
            return
        metadata = None
        if ref.id:
            payload: dict[str, Any] = {"id": ref.id, "part": part, "kind": type(outcome).__name__}
            if calls:
                payload["calls"] = calls
            if isinstance(outcome, Notice):
                payload["notice"] = outcome.kind.value
            metadata = {"event_type": EVENT_TYPE, "event_payload": payload}
        await self.client.chat_postMessage(
            channel=channel, thread_ts=thread_ts, metadata=metadata, **message
        )

    async def _already_posted(self, outcome: Outcome, outbox_id: str, part: int) -> bool:
        for message in await self._bot_posts(outcome, fresh=True):
            payload = message["metadata"].get("event_payload", {})
            if payload.get("id") == outbox_id and int(payload.get("part", 0)) == part:
                return True
        return False

    async def _find_card(self, outcome: Outcome, call_id: str) -> str | None:
        """`channel:ts` of the approval request for `call_id` in the thread, if any."""
        for message in await self._bot_posts(outcome, fresh=False):
            payload = message["metadata"].get("event_payload", {})
            if call_id in str(payload.get("calls", "")).split(","):
                return f"{outcome.key.channel}:{message['ts']}"
        return None

    async def _bot_posts(self, outcome: Outcome, *, fresh: bool) -> list[dict[str, Any]]:
        """This bot's posts in the thread that carry outcome metadata (newest last)."""
        key = (outcome.key.channel, outcome.key.thread_ts)
        cached = self._posted.get(key)
        if cached and not fresh and time.monotonic() - cached[0] < LOOKUP_SECONDS:
            return cached[1]
        found: list[dict[str, Any]] = []
        try:
            cursor = None
            while True:
                page = await self.client.conversations_replies(
                    channel=key[0], ts=key[1], include_all_metadata=True, limit=200, cursor=cursor
                )
                messages: list[dict[str, Any]] = page.get("messages", [])
                for message in messages:
                    metadata = message.get("metadata") or {}
                    if metadata.get("event_type") == EVENT_TYPE:
                        found.append(message)
                cursor = (page.get("response_metadata") or {}).get("next_cursor")
                if not cursor:
                    break
        except SlackApiError as exc:  # cannot look: post anyway (at least once beats never)
            log.warning("%s: could not read the thread: %s", outcome.key, slack_error(exc))
            return []
        self._posted[key] = (time.monotonic(), found)
        return found

    async def _update(self, card: str, outcome: Outcome, blocks: list[dict[str, Any]]) -> None:
        channel, _, ts = card.partition(":")
        try:
            await self.client.chat_update(
                channel=channel, ts=ts, text="Approval request (closed)", blocks=blocks
            )
        except SlackApiError as exc:  # the outcome stands; only the old buttons remain
            log.warning("%s: updating the request %s failed: %s", outcome.key, card, exc)

    async def _answer_privately(self, outcome: Refused | StatusReply) -> None:
        """An answer to one person's request: through its response_url, else ephemeral."""
        if outcome.reply_to:
            response = await AsyncWebhookClient(outcome.reply_to).send(
                text=outcome.text, response_type="ephemeral", replace_original=False
            )
            if response.status_code >= 400:
                log.warning("%s: response_url answered %s", outcome.key, response.status_code)
        elif isinstance(outcome, Refused) and outcome.user:
            await self.client.chat_postEphemeral(
                channel=outcome.key.channel,
                user=outcome.user,
                thread_ts=outcome.key.thread_ts,
                text=outcome.text,
            )
