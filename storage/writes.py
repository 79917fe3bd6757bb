"""What the storage contract's writes take and give back: the limits one atomic write
honours on both backends, `Commit` (one fenced change to a conversation) and what a write
reports (`Committed`, `KeepResult`, `SessionPage`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from storage.models import (
    CheckpointPointer,
    Conversation,
    ConversationKey,
    DeliveryMark,
    Lease,
    Status,
    Summary,
    ToolCallRecord,
)
from storage.people import PersonKey

# DynamoDB's limits shape what one atomic append may hold; both backends honour them so
# that the contract (and its tests) are the same.
INLINE_ITEM_LIMIT = 300_000  # bytes of one item kept in the table, below the 400 KB item cap
INLINE_CHECKPOINT_LIMIT = 16_000  # a finished checkpoint this small lives in its pointer
TRANSACTION_ACTIONS_LIMIT = 100  # DynamoDB's cap on actions in one TransactWriteItems
TRANSACTION_ITEM_LIMIT = 90  # session rows per transaction, leaving room for the rest
TRANSACTION_BYTES_LIMIT = 3_000_000  # below the 4 MB transaction cap
CONSUME_LIMIT = 50  # inbox entries one commit may consume; callers take larger backlogs in chunks
BACKLOG_LIMIT = 1000  # messages a thread may have queued; past it, a keep is refused
DROPPED_KEPT = 10  # unanswered messages an expired record names (see `Expiry.dropped`)
APPEND_ATTEMPTS = 50


class _Keep:
    """Marker: leave the checkpoint pointer as it is."""


KEEP = _Keep()


@dataclass(frozen=True)
class KeepResult:
    """What `keep` did: whether the message was kept (False: a duplicate, or `refused`
    because the thread's backlog is full: nothing was queued, but the event is claimed, so
    that another delivery of the same message is a duplicate), and, when the caller asked
    to take the thread and it was free, the lease and the record (inbox included)."""

    kept: bool
    lease: Lease | None = None
    record: Conversation | None = None
    refused: bool = False
    named: bool = False  # refused, and named on the record (not only counted)


@dataclass(frozen=True)
class LeaseRequest:
    """One `acquire`'s arguments, as `Store.acquire` hands them to a backend (see there)."""

    key: ConversationKey
    owner: str
    status: Status | None
    force: bool
    create: bool
    takeover_from: str | None


@dataclass(frozen=True)
class KeepRequest:
    """One `keep`'s arguments, as `Store.keep` hands them to a backend (see there)."""

    key: ConversationKey
    event_id: str
    payload: str
    create: bool
    participant: str | None
    owner: str | None
    token: str | None
    stop_by: str | None
    refusal_text: str
    capped: bool


@dataclass(frozen=True)
class SessionPage:
    """Session items read from the store, with the counters an append must build on."""

    items: list[str]
    next_seq: int


@dataclass(frozen=True)
class Committed:
    """What an atomic write left behind: enough for the writer's next write. Backends
    report only what the write itself decided, so that no extra read is needed."""

    key: ConversationKey
    next_seq: int | None  # None when the write neither appended nor checked the session
    checkpoint: CheckpointPointer | None  # the pointer this write committed, if any
    status: Status | None  # None: unchanged by this write
    armed: tuple[str, ...] = ()  # call ids this write recorded as approved (not seen before)


@dataclass
class Commit:
    """One atomic, fenced change to a conversation."""

    key: ConversationKey
    lease: Lease | None
    items: Sequence[str] = ()
    base_seq: int | None = None  # next_seq the items were staged against (None: current)
    checkpoint: CheckpointPointer | _Keep | None = KEEP
    expected_version: int | None = None  # checkpoint version the writer last saw
    status: Status | None = None
    release: bool = False
    touch: bool = True  # counts as activity (moves last_activity_at and expires_at)
    consume: Sequence[str] = ()  # inbox entry ids this write consumes (at most CONSUME_LIMIT)
    arm: Sequence[ToolCallRecord] = ()  # calls this write approves (ledger rows, `approved`)
    delivered: bool = False  # every outcome of the (resulting) checkpoint was delivered
    delivery: DeliveryMark | None = None  # where delivery stands (overrides `delivered`)
    inbox_seen: int | None = None  # fail with InboxChanged if messages arrived since
    # Who started the run this write belongs to (None: unchanged): whom a stop is
    # authorised against. A write that sets the status to awaiting approval lists the
    # conversation for them (`list_waiting_on`).
    run_by: str | None = None
    # A person to note this conversation for, first of their recent ones (`noting`), in
    # the same write where the backend can; never a reason for the write to fail.
    note: PersonKey | None = None
    clear_expiry: bool = False  # the thread was told its state expired (`expired_from`)
    clear_stop: bool = False  # a stop request was applied (`stop_by` goes)
    # The conversation's summary from now on (replacing any earlier one, which it folds in):
    # stored with the checkpoint that first gives it to the model (`Store.read_summary`).
    summary: Summary | None = None
    # Makes a retried write idempotent (DynamoDB's ClientRequestToken): a retry of a write
    # whose answer was lost is not applied twice, nor refused for its own earlier effect.
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        if len(self.consume) > CONSUME_LIMIT:
            raise ValueError(f"one commit consumes at most {CONSUME_LIMIT} inbox entries")


def summed_up(commit: Commit, floor: int, next_seq: int) -> None:
    """Raises ValueError when `commit` carries a summary of items the conversation does not
    have: past the items this very write leaves (or, where the write knows it, below the
    session's floor)."""
    summary = commit.summary
    if summary is not None and not floor < summary.through <= next_seq:
        raise ValueError(
            f"{commit.key}: a summary through item {summary.through} of items {floor}-{next_seq}"
        )
