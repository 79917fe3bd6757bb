"""What the runtime reports, for the Slack layer (or any caller) to show in the thread.

Text in outcomes that came from the model, a tool or a user is raw: whoever renders it for a
chat surface escapes it there."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel

from storage import ConversationKey, Status


class NoticeKind(StrEnum):
    RESUMED_AFTER_RESTART = "resumed_after_restart"
    STATE_EXPIRED = "state_expired"
    STATE_INCOMPATIBLE = "state_incompatible"
    STATE_DAMAGED = "state_damaged"
    TOOL_OUTCOME_UNKNOWN = "tool_outcome_unknown"
    TOOL_FINISHED_LATE = "tool_finished_late"  # after its conversation was set aside
    TOOL_COMPLETED_AFTER_RESTART = "tool_completed_after_restart"  # a keyed call, run again
    DISCARDED = "discarded"
    RUN_FAILED = "run_failed"
    MESSAGE_KEPT = "message_kept"
    QUEUED = "queued"
    STOPPED = "stopped"
    GUARDRAIL = "guardrail"  # a guardrail's tripwire ended the request
    NOT_TAKEN = "not_taken"  # messages refused because the thread's backlog is full
    CONTEXT_UNAVAILABLE = "context_unavailable"  # a thread's earlier messages were not read
    FILES_NOT_READ = "files_not_read"  # shared files the model was not given
    TOOLS_UNAVAILABLE = "tools_unavailable"  # a run waits for MCP servers that are down
    TOO_LARGE = "too_large"  # a request that does not fit the model's window, even fitted


class Outcome(BaseModel):
    key: ConversationKey


class Answer(Outcome):
    """The agent's final output for a run."""

    text: str


class PendingCall(BaseModel):
    """A call waiting for a decision. `agent`: the agent that asks for it when it is not the
    bot's own agent (a handoff's target, an agent used as a tool), for the request to say
    so; None when the bot's own agent asks."""

    call_id: str
    tool_name: str
    arguments: str
    agent: str | None = None


class ApprovalRequest(Outcome):
    """The run is paused until someone allowed decides each call. `approvers` are the
    configured approvers besides `requested_by`."""

    calls: list[PendingCall]
    checkpoint_version: int
    requested_by: str
    approvers: list[str] = []
    reminder: bool = False


class AwaitingDecision(Outcome):
    """The run now waits for a decision on a request it asked (the release that pauses it
    landed, so listings of what waits on whom show it from now on): for surfaces that list
    approvals (Slack's Home tab) to show it. Not recorded: a hint, given once, best effort.
    `approvers` are the configured approvers besides `requested_by`."""

    requested_by: str
    approvers: list[str] = []


class Decided(Outcome):
    """A decision was applied. `request_message` is the caller's reference to the message
    whose button was clicked (the Slack layer replaces its buttons with the decision)."""

    call_id: str
    tool_name: str
    arguments: str = ""
    agent: str | None = None  # as the request named it (`PendingCall.agent`)
    approved: bool
    user: str
    reason: str | None = None
    request_message: str | None = None


class Notice(Outcome):
    """A statement in the thread. `reference` ties it to the logs when something failed;
    `settles` lists calls whose approval requests this notice makes moot (`closes_cards`:
    every approval request still open in the thread, named or not); `details` are lines
    listed under the text that come from outside (file names, quotes): raw, like model
    text."""

    kind: NoticeKind
    text: str
    reference: str | None = None
    settles: list[PendingCall] = []
    closes_cards: bool = False
    details: list[str] = []


class Refused(Outcome):
    """The request changed nothing; `text` says why (shown to the requester only, through
    `reply_to` when the request came with one)."""

    text: str
    reply_to: str | None = None
    user: str | None = None


class Duplicate(Outcome):
    """A retried or repeated delivery of an event already handled."""

    event_id: str


class StatusReply(Outcome):
    """A plain statement in answer to a request (e.g. `/resume` on an idle thread).
    `replaces`: through `reply_to`, it takes the place of the message the request came
    from (a list whose button was clicked), which would otherwise stay as it was."""

    text: str
    reply_to: str | None = None
    replaces: bool = False


class Discarded(Outcome):
    removed_checkpoint: str | None
    pending_calls: list[PendingCall]
    ran_calls: list[PendingCall] = []
    unknown_calls: list[PendingCall] = []
    dropped_messages: int
    previous_status: Status


RECORDED = (Answer, ApprovalRequest, Decided, Notice, StatusReply)


@dataclass(frozen=True)
class DeliveryRef:
    """How an outcome is being delivered: `id` names it in its conversation's outbox (""
    for one that is not recorded there); `maybe_posted` says an earlier attempt may have
    posted it already, so the sink should look before posting again. `recheck`: it was
    delivered by a serve whose thread was then taken from it before that was recorded, so
    the new holder may deliver it again; the sink posts nothing, and looks a little later
    for copies of it (keeping the earliest)."""

    id: str = ""
    maybe_posted: bool = False
    recheck: bool = False


def to_outbox(outcome: Outcome, outbox_id: str) -> dict[str, object]:
    return {"type": type(outcome).__name__, "id": outbox_id, **outcome.model_dump(mode="json")}


def from_outbox(entry: dict[str, object]) -> tuple[str, Outcome]:
    kinds: dict[str, type[Outcome]] = {cls.__name__: cls for cls in RECORDED}
    kinds["Status"] = StatusReply  # written by earlier versions
    data = dict(entry)
    kind = kinds[str(data.pop("type"))]
    outbox_id = str(data.pop("id", ""))
    return outbox_id, kind.model_validate(data)


def new_reference() -> str:
    """A short id that ties a notice shown to users to the log lines with the details."""
    return "ref-" + secrets.token_hex(4)


def quote(text: str, limit: int = 120) -> str:
    """A short quote of someone's message, on one line (to name it in a notice); a message
    without text (files only) is named as such, never as an empty quote."""
    flat = " ".join(text.split())
    if not flat:
        return "(a message without text)"
    cut = flat if len(flat) <= limit else flat[: limit - 1] + "…"
    return f"“{cut}”"


def messages_were(count: int, which: str) -> str:
    """How many messages `which` were (a notice's sentence about them), in agreement:
    "1 message sent here was", "2 messages sent here were"."""
    many = count != 1
    return f"{count} message{'s' if many else ''} {which} {'were' if many else 'was'}"


def quoted_then_counted(quotes: Sequence[str], total: int, limit: int) -> list[str]:
    """A notice's details naming messages: the first `limit` quotes, then how many more of
    the `total` it is about ("… and 27 more")."""
    shown = list(quotes[:limit])
    rest = total - len(shown)
    return shown + ([f"… and {rest} more"] if rest > 0 else [])
