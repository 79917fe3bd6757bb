"""What the runtime reports, for the Slack layer (or any caller) to show in the thread."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel

from storage import ConversationKey


class NoticeKind(StrEnum):
    RESUMED_AFTER_RESTART = "resumed_after_restart"
    STATE_EXPIRED = "state_expired"
    STATE_INCOMPATIBLE = "state_incompatible"
    STATE_DAMAGED = "state_damaged"
    TOOL_OUTCOME_UNKNOWN = "tool_outcome_unknown"
    DISCARDED = "discarded"
    RUN_FAILED = "run_failed"
    MESSAGE_KEPT = "message_kept"
    QUEUED = "queued"


class Outcome(BaseModel):
    key: ConversationKey


class Answer(Outcome):
    """The agent's final output for a run."""

    text: str


class PendingCall(BaseModel):
    call_id: str
    tool_name: str
    arguments: str


class ApprovalRequest(Outcome):
    """The run is paused until someone allowed decides each call."""

    calls: list[PendingCall]
    checkpoint_version: int
    requested_by: str
    reminder: bool = False


class Decided(Outcome):
    """A decision was applied. `request_message` is the caller's reference to the message
    whose button was clicked (the Slack layer replaces its buttons with the decision)."""

    call_id: str
    tool_name: str
    arguments: str = ""
    approved: bool
    user: str
    reason: str | None = None
    request_message: str | None = None


class Notice(Outcome):
    kind: NoticeKind
    text: str


class Refused(Outcome):
    """The request changed nothing; `text` says why (shown to the requester only)."""

    text: str


class Duplicate(Outcome):
    """A retried or repeated delivery of an event already handled."""

    event_id: str


class Status(Outcome):
    """A plain statement in answer to a request (e.g. `/resume` on an idle thread)."""

    text: str


def to_outbox(outcome: Outcome) -> dict[str, object]:
    return {"type": type(outcome).__name__, **outcome.model_dump(mode="json")}


def from_outbox(entry: dict[str, object]) -> Outcome:
    kinds: dict[str, type[Outcome]] = {
        cls.__name__: cls for cls in (Answer, ApprovalRequest, Decided, Notice, Status)
    }
    data = dict(entry)
    kind = kinds[str(data.pop("type"))]
    return kind.model_validate(data)


class Discarded(Outcome):
    removed_checkpoint: str | None
    pending_calls: list[PendingCall]
    dropped_messages: int
    previous_status: str
