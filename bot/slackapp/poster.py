"""Posts the runtime's outcomes into their Slack threads (the runtime's outcome sink).

Every post carries a mark (`marks`: Slack message metadata naming the outcome, its outbox id
and part), so that a redelivery after a crash or a lost answer first reads the thread back
and posts only what is not there; a few seconds after such a post the thread is read once
more, and a second copy (a dead process's post that was still in flight, landed after the
first read-back) is deleted (`duplicates`), so that the thread keeps one. Answers are Markdown
(`markdown` blocks, split at Slack's 12,000 characters) with feedback buttons under the last
part; the first part closes the reply this process streamed while the run worked (`live`),
if any. Failures are sorted for the runtime: permanent Slack errors (the bot left the
channel, the message is invalid, the token was revoked) are not retried; anything else is,
later, with backoff. A decision is said once, by its request's card, edited (the clicked
one, or the one found by call id for a reply or a click on the Home tab); a post says it only
when there is no card or Slack will not let it be edited. Requests set aside get their
buttons replaced too. Each post goes out with the token of its conversation's
workspace (`clients`); a workspace where the app is no longer installed is a permanent
failure, and nothing is sent."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot import metrics
from bot.runtime import (
    Answer,
    ApprovalRequest,
    AwaitingDecision,
    Decided,
    DeliveryFailed,
    DeliveryRef,
    Notice,
    NoticeKind,
    Outcome,
    Refused,
    StatusReply,
)
from bot.slackapp.agent_blocks import feedback_blocks, markdown_block
from bot.slackapp.blocks import (
    approval_blocks,
    decided_blocks,
    decision_text,
    set_aside_blocks,
    shows_decision,
)
from bot.slackapp.clients import NOT_INSTALLED, SlackClients, TeamNotInstalled, as_clients
from bot.slackapp.duplicates import RECHECK_SECONDS, DuplicateCheck
from bot.slackapp.home import ON_HOME
from bot.slackapp.live import LiveThreads
from bot.slackapp.markdown import safe_markdown, split_markdown
from bot.slackapp.marks import mark
from bot.slackapp.text import MESSAGE_LIMIT, escape, truncate
from bot.slackapp.thread_readback import ThreadReadback
from storage import ConversationKey, StorageError

log = logging.getLogger(__name__)
NOTICE_ICONS = {
    NoticeKind.RESUMED_AFTER_RESTART: ":arrows_counterclockwise:",
    NoticeKind.STATE_EXPIRED: ":hourglass:",
    NoticeKind.STATE_INCOMPATIBLE: ":warning:",
    NoticeKind.STATE_DAMAGED: ":warning:",
    NoticeKind.TOOL_OUTCOME_UNKNOWN: ":grey_question:",
    NoticeKind.TOOL_FINISHED_LATE: ":white_check_mark:",
    NoticeKind.TOOL_COMPLETED_AFTER_RESTART: ":repeat:",
    NoticeKind.DISCARDED: ":wastebasket:",
    NoticeKind.RUN_FAILED: ":x:",
    NoticeKind.MESSAGE_KEPT: ":inbox_tray:",
    NoticeKind.STOPPED: ":octagonal_sign:",
    NoticeKind.CONTEXT_UNAVAILABLE: ":warning:",
    NoticeKind.FILES_NOT_READ: ":paperclip:",
    NoticeKind.NOT_TAKEN: ":warning:",
    NoticeKind.GUARDRAIL: ":shield:",
    NoticeKind.TOOLS_UNAVAILABLE: ":electric_plug:",
    NoticeKind.TOO_LARGE: ":straight_ruler:",
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
# chat.update answers after which the card will never show a decision: it is said in a post
# instead (https://api.slack.com/methods/chat.update#errors).
EDIT_REFUSED = frozenset(
    {
        "message_not_found",
        "cant_update_message",
        "edit_window_closed",
        "msg_too_long",
        "invalid_blocks",
        "invalid_blocks_format",
        "no_text",
        "is_inactive",
    }
)
FALLBACK_LIMIT = 300  # characters of an answer in its notification text


def slack_error(exc: SlackApiError) -> str:
    """Slack's error code, or the HTTP status when the answer was not Slack's JSON."""
    data = exc.response.data
    if isinstance(data, dict) and data.get("error"):
        return str(data["error"])
    return f"http_{exc.response.status_code}"


class SlackPoster:
    def __init__(
        self,
        client: AsyncWebClient | SlackClients,
        live: LiveThreads | None = None,
        *,
        recheck_after: float = RECHECK_SECONDS,
        after_decision: Callable[[Decided], None] | None = None,
        on_home: Callable[[Refused], None] | None = None,
        after_request: Callable[[AwaitingDecision], None] | None = None,
    ) -> None:
        self.clients = as_clients(client)
        self.live = live
        self.after_decision = after_decision  # e.g. the Home tabs it changes, refreshed
        self.after_request = after_request  # a run waits for a decision: the Home tabs too
        self.on_home = on_home  # answers a refused click made on the Home tab
        self.readback = ThreadReadback(self.clients)
        self.duplicates = DuplicateCheck(self.readback, recheck_after)

    async def close(self) -> None:
        """Before the Web API session closes: the second read-backs still waiting run now."""
        await self.duplicates.close()

    async def __call__(self, outcome: Outcome, ref: DeliveryRef) -> None:
        if ref.recheck:
            self._look_again(outcome, ref)
            return
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
        except TeamNotInstalled as exc:  # uninstalled or revoked: there is no one to post to
            metrics.DELIVERY_FAILURES.labels(NOT_INSTALLED).inc()
            log.warning("not posting %s to %s: %s", type(outcome).__name__, outcome.key, exc)
            raise DeliveryFailed(NOT_INSTALLED, permanent=True) from exc
        except StorageError as exc:  # the installation could not be read: later
            metrics.DELIVERY_FAILURES.labels("storage").inc()
            log.error("posting %s to %s: no token: %r", type(outcome).__name__, outcome.key, exc)
            raise DeliveryFailed("storage", permanent=False) from exc

    async def _deliver(self, outcome: Outcome, ref: DeliveryRef) -> None:
        if isinstance(outcome, Answer):
            await self._answer(outcome, ref)
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
            await self._notice(outcome, ref)
        elif isinstance(outcome, Decided):
            await self._decided(outcome, ref)
            if self.after_decision is not None:
                self.after_decision(outcome)
        elif isinstance(outcome, Refused | StatusReply):
            await self._answer_privately(outcome)
        elif isinstance(outcome, AwaitingDecision) and self.after_request is not None:
            self.after_request(outcome)
        # Duplicate and Discarded answer one request: the caller shows them.

    async def _answer(self, outcome: Answer, ref: DeliveryRef) -> None:
        """Markdown, made safe, in parts; the feedback buttons under the last one. The first
        part goes into the reply streamed while the run worked, when there is one."""
        key = outcome.key
        if ref.maybe_posted:  # a dead process may have left its stream half-written
            await self.readback.tidy_interrupted(key, keep=self._open_stream(outcome))
        pieces = split_markdown(safe_markdown(outcome.text).strip() or "_(no answer)_")
        fallback = truncate(escape(outcome.text), FALLBACK_LIMIT) or "(no answer)"
        for part, piece in enumerate(pieces):
            footer = feedback_blocks(key, ref.id) if ref.id and part == len(pieces) - 1 else []
            blocks = [markdown_block(piece), *footer]
            if (
                ref.id
                and ref.maybe_posted
                and await self.readback.already_posted(key, ref.id, part)
            ):
                log.info("%s: %s part %d is already in the thread", key, ref.id, part)
                continue
            metadata = _mark(outcome, ref, part)
            if part == 0 and self.live is not None:
                streamed = await self.live.finish_answer(
                    key,
                    outcome.text,
                    fallback=fallback,
                    blocks=blocks,
                    footer=footer,
                    metadata=metadata,
                )
                if streamed:
                    self._check_later(key, ref, part)
                    continue
            client = await self.clients.for_key(key)
            await client.chat_postMessage(
                channel=key.channel,
                thread_ts=key.thread_ts,
                text=fallback,
                blocks=blocks,
                metadata=metadata,
                unfurl_links=False,
            )
            self._check_later(key, ref, part)

    async def _decided(self, outcome: Decided, ref: DeliveryRef) -> None:
        """A decision is said once, by its request's card: the clicked one, else the one
        found in the thread by call id. A post says it only when there is no card, or Slack
        refuses to edit it for good (a card gone is looked for once more: a second copy of
        it may be the one left). A transient failure is raised, for the outbox to retry."""
        key = outcome.key
        if ref.maybe_posted and await self._decision_said(outcome, ref):
            log.info("%s: the decision %s is already in the thread", key, ref.id)
            return
        card = outcome.request_message or await self._find_card(outcome)
        for again in (False, True):
            if card is None:
                break
            refused = await self._show_decision(card, outcome)
            if refused is None:
                return
            if refused != "message_not_found" or again:
                break
            self.readback.forget(key)
            other = await self._find_card(outcome)
            card = other if other != card else None
        text = truncate(decision_text(outcome), MESSAGE_LIMIT)
        await self._post(outcome, ref, 0, text=text)

    async def _find_card(self, outcome: Decided) -> str | None:
        """`channel:ts` of the call's card in the thread; a thread Slack would not let us
        read is a failure to retry, not a thread without a card."""
        card = await self.readback.card(outcome.key, outcome.call_id, strict=True)
        return f"{outcome.key.channel}:{card['ts']}" if card else None

    async def _decision_said(self, outcome: Decided, ref: DeliveryRef) -> bool:
        """After an attempt that may have landed: its post is in the thread, or the card
        shows the decision already."""
        if ref.id and await self.readback.already_posted(outcome.key, ref.id, 0):
            return True
        card = await self.readback.card(outcome.key, outcome.call_id, strict=True)
        return card is not None and shows_decision(card, outcome)

    async def _show_decision(self, card: str, outcome: Decided) -> str | None:
        """The card edited to say the decision; None when it was, else the error code
        of an edit Slack will never accept. Any other failure is raised."""
        channel, _, ts = card.partition(":")
        client = await self.clients.for_key(outcome.key)
        try:
            await client.chat_update(
                channel=channel,
                ts=ts,
                text=truncate(decision_text(outcome), MESSAGE_LIMIT),
                blocks=decided_blocks(outcome),
            )
        except SlackApiError as exc:
            reason = slack_error(exc)
            if reason not in EDIT_REFUSED:
                raise
            log.warning("%s: %s cannot show the decision: %s", outcome.key, card, reason)
            return reason
        return None

    async def _notice(self, outcome: Notice, ref: DeliveryRef) -> None:
        metrics.NOTICES.labels(outcome.kind.value).inc()
        if outcome.kind is NoticeKind.RESUMED_AFTER_RESTART:
            await self.readback.tidy_interrupted(outcome.key, keep=self._open_stream(outcome))
        icon = NOTICE_ICONS.get(outcome.kind, ":information_source:")
        reference = f" (reference: {outcome.reference})" if outcome.reference else ""
        details = "".join(f"\n• {escape(line)}" for line in outcome.details)  # from users
        text = f"{icon} {outcome.text}{reference}{details}"
        await self._post(outcome, ref, 0, text=truncate(text, MESSAGE_LIMIT))
        for call in outcome.settles:
            card = await self.readback.find_card(outcome.key, call.call_id)
            if card:
                await self._update(card, outcome, set_aside_blocks(call, "Set aside: see below."))
        if outcome.closes_cards:  # every request still open, named above or not
            for message in await self.readback.open_cards(outcome.key):
                card = f"{outcome.key.channel}:{message['ts']}"
                await self._update(card, outcome, without_buttons(message, "Closed: see below."))

    def _open_stream(self, outcome: Outcome) -> str | None:
        return self.live.open_stream(outcome.key) if self.live else None

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
        key = outcome.key
        if ref.id and ref.maybe_posted and await self.readback.already_posted(key, ref.id, part):
            log.info("%s: %s part %d is already in the thread", key, ref.id, part)
            return
        client = await self.clients.for_key(key)
        await client.chat_postMessage(
            channel=key.channel,
            thread_ts=key.thread_ts,
            metadata=_mark(outcome, ref, part, calls),
            **message,
        )
        self._check_later(key, ref, part)
        if self.live is not None:
            self.live.posted_below(key)

    def _look_again(self, outcome: Outcome, ref: DeliveryRef) -> None:
        """Delivered by a serve that lost the thread before recording it: every part it
        posted is checked for copies later, as after a redelivery (`duplicates`)."""
        if isinstance(outcome, Answer):
            parts = len(split_markdown(safe_markdown(outcome.text).strip() or "_(no answer)_"))
        elif isinstance(outcome, ApprovalRequest):
            parts = len(outcome.calls)
        else:
            parts = 1
        for part in range(parts):
            self.duplicates.after_post(outcome.key, ref.id, part)

    def _check_later(self, key: ConversationKey, ref: DeliveryRef, part: int) -> None:
        """A post that may repeat one still in flight from a dead process: the thread is
        read again shortly, and a second copy deleted (`duplicates`)."""
        if ref.id and ref.maybe_posted:
            self.duplicates.after_post(key, ref.id, part)

    async def _update(self, card: str, outcome: Outcome, blocks: list[dict[str, Any]]) -> None:
        channel, _, ts = card.partition(":")
        client = await self.clients.for_key(outcome.key)
        try:
            await client.chat_update(
                channel=channel, ts=ts, text="Approval request (closed)", blocks=blocks
            )
        except SlackApiError as exc:  # the outcome stands; only the old buttons remain
            log.warning("%s: updating the request %s failed: %s", outcome.key, card, exc)

    async def _answer_privately(self, outcome: Refused | StatusReply) -> None:
        """An answer to one person's request: through its response_url (on the Home tab,
        for a click made there), else ephemeral."""
        if outcome.reply_to == ON_HOME:
            if self.on_home is not None and isinstance(outcome, Refused):
                self.on_home(outcome)
            return
        if outcome.reply_to:
            replace = isinstance(outcome, StatusReply) and outcome.replaces
            response = await AsyncWebhookClient(outcome.reply_to).send(
                text=outcome.text, response_type="ephemeral", replace_original=replace
            )
            if response.status_code >= 400:
                log.warning("%s: response_url answered %s", outcome.key, response.status_code)
        elif isinstance(outcome, Refused) and outcome.user:
            client = await self.clients.for_key(outcome.key)
            await client.chat_postEphemeral(
                channel=outcome.key.channel,
                user=outcome.user,
                thread_ts=outcome.key.thread_ts,
                text=outcome.text,
            )


def without_buttons(message: dict[str, Any], why: str) -> list[dict[str, Any]]:
    """An approval request as posted, its buttons replaced by why it is closed."""
    kept = [b for b in message.get("blocks") or [] if b.get("type") not in ("actions", "context")]
    return [
        *kept,
        {"type": "context", "elements": [{"type": "mrkdwn", "text": f":heavy_minus_sign: {why}"}]},
    ]


def _mark(outcome: Outcome, ref: DeliveryRef, part: int, calls: str = "") -> dict[str, Any]:
    """The metadata naming what a post delivers (see `marks`)."""
    fields: dict[str, Any] = {"part": part}
    if ref.id:
        fields["id"] = ref.id
    if calls:
        fields["calls"] = calls
    if isinstance(outcome, Notice):
        fields["notice"] = outcome.kind.value
    return mark(type(outcome).__name__, **fields)
