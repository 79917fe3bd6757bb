"""Records kept per Slack thread: the conversation, its lease, its checkpoint pointer."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from storage.text import plain_text

# Text from outside (a tool, the model) as the stores can hold it (see `storage.text`).
StoredText = Annotated[str, AfterValidator(plain_text)]


def utcnow() -> datetime:
    return datetime.now(UTC)


class Status(StrEnum):
    """Where a conversation stands. `running` with an expired lease means a process died.
    The values are durable: records, the status index's keys and the counters hold them."""

    IDLE = "idle"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    INTERRUPTED = "interrupted"
    # Its saved state could not be trusted and was set aside (the next message starts a
    # fresh run). Stored under its first name, which people never see (`status_name`).
    SET_ASIDE = "needs_restart"
    DISCARDED = "discarded"


def inbox_stamp(moment: datetime) -> str:
    """The start of an inbox entry id: arrival time in microseconds, so ids sort in arrival
    order (ties need two messages for one thread within a microsecond)."""
    return f"{int(moment.timestamp() * 1_000_000):018d}"


UNCAPPED = "~uncapped"  # an inbox entry id's second part: not counted in the backlog cap


def inbox_entry_id(moment: datetime, event_id: str, *, capped: bool = True) -> str:
    """An inbox entry's id: its arrival stamp, then (for a request kept past the backlog
    cap, `keep(capped=False)`) `UNCAPPED`, then its event id. What is counted is read from
    the id alone, so that the commit consuming an entry needs no read to count it out."""
    stamp = inbox_stamp(moment)
    return f"{stamp}#{event_id}" if capped else f"{stamp}#{UNCAPPED}#{event_id}"


def capped_entry(entry_id: str) -> bool:
    """Whether the inbox entry counts against the thread's backlog cap (`inbox_entry_id`)."""
    return entry_id.split("#", 2)[1:2] != [UNCAPPED]


def stamp_ms(entry_id: str) -> int:
    """The arrival time (ms) of an inbox entry id (15 digits of ms in older ids)."""
    stamp = entry_id.split("#", 1)[0]
    return int(stamp) // 1000 if len(stamp) >= 18 else int(stamp)


class InboxEntry(BaseModel):
    """A user message kept durably until the commit that consumes it."""

    model_config = ConfigDict(frozen=True)

    entry_id: str  # sorts in arrival order
    event_id: str
    payload: str
    received_at: datetime
    token: str = ""  # the keeping write's own token: tells its retry from a duplicate


class ConversationKey(BaseModel):
    """One Slack thread: `team:channel:thread_ts`, or `enterprise:team:channel:thread_ts` in
    a workspace of an Enterprise Grid organisation. Keys without an enterprise (all keys
    written before enterprises were known) keep their three-part form, so nothing stored
    under them moves."""

    model_config = ConfigDict(frozen=True)

    team: str = Field(min_length=1, pattern=r"^[^:/\s]+$")
    channel: str = Field(min_length=1, pattern=r"^[^:/\s]+$")
    thread_ts: str = Field(min_length=1, pattern=r"^[0-9]+(\.[0-9]+)?$")
    enterprise: str | None = Field(default=None, min_length=1, pattern=r"^[^:/\s]+$")

    @classmethod
    def parse(cls, text: str) -> ConversationKey:
        parts = text.split(":")
        if len(parts) == 3:
            team, channel, thread_ts = parts
            return cls(team=team, channel=channel, thread_ts=thread_ts)
        if len(parts) == 4:
            enterprise, team, channel, thread_ts = parts
            return cls(enterprise=enterprise, team=team, channel=channel, thread_ts=thread_ts)
        raise ValueError(f"not a conversation key: {text[:200]!r}")

    def __str__(self) -> str:
        workspace = f"{self.enterprise}:{self.team}" if self.enterprise else self.team
        return f"{workspace}:{self.channel}:{self.thread_ts}"

    @property
    def path(self) -> str:
        """The key as an object-store path segment."""
        return str(self).replace(":", "/")

    @property
    def place(self) -> str:
        """The thread's channel, as `place_of` names it."""
        return str(self).rsplit(":", 1)[0]

    @property
    def workspace(self) -> str:
        """The thread's workspace, as `workspace_of` names it."""
        return f"{self.enterprise}:{self.team}" if self.enterprise else self.team


_KEY_PART = re.compile(r"[^:/\s]+")  # what ConversationKey allows in a team, channel, enterprise


def place_of(team: str, channel: str, enterprise: str | None = None) -> str | None:
    """One channel of one workspace: its threads' keys without their `:thread_ts`
    (`[enterprise:]team:channel`). None when these could not be parts of a key (so that no
    crafted value names, or starts, another workspace's place)."""
    parts = (enterprise, team, channel) if enterprise else (team, channel)
    if not all(_KEY_PART.fullmatch(part) for part in parts):
        return None
    return ":".join(parts)


def team_prefix(team: str | None, enterprise: str | None) -> str:
    """What the keys of a team's conversations start with (see `ConversationKey`)."""
    return ":".join(part for part in (enterprise, team) if part) + ":"


def workspace_of(team: str, enterprise: str | None = None) -> str | None:
    """One workspace, as keys name it: `[enterprise:]team`. None when these could not be
    parts of a key (as with `place_of`)."""
    parts = (enterprise, team) if enterprise else (team,)
    if not all(_KEY_PART.fullmatch(part) for part in parts):
        return None
    return ":".join(parts)


def waitable(user: str | None) -> bool:
    """A person an approval may be listed for: an id that can be part of an index key (the
    approval index's sort key is `<user>#<since>`, so no `#` either)."""
    return user is not None and _KEY_PART.fullmatch(user) is not None and "#" not in user


class CheckpointPointer(BaseModel):
    """Where the latest committed RunState lives, and how to verify it."""

    model_config = ConfigDict(frozen=True)

    object_key: str
    version: int = Field(ge=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    schema_version: str
    agent_fingerprint: str
    created_at: datetime
    fence: int = Field(ge=1, description="fencing token of the writer")
    session_seq: int = Field(
        ge=0, description="session watermark: items with seq < this were committed with it"
    )
    finished: bool = Field(
        default=False, description="it holds no run to continue (so there is no need to load it)"
    )
    inline: str | None = Field(
        default=None,
        description="the stored bytes themselves (base64), for a small finished checkpoint: "
        "then there is no object",
    )


class Verdict(StrEnum):
    """A person's feedback on one answer."""

    GOOD = "good"
    BAD = "bad"


class FeedbackTally(BaseModel):
    good: int = 0
    bad: int = 0

    def add(self, other: FeedbackTally) -> FeedbackTally:
        return FeedbackTally(good=self.good + other.good, bad=self.bad + other.bad)


class Expiry(BaseModel):
    """What a conversation's record keeps of the state that expired under it, so that the
    first event after the expiry can say so in the thread (see `Conversation.expired_from`).
    `checkpoint` is the pointer the expired state had (its object may still be readable, or
    gone); `dropped` quotes messages that were queued and never answered, the first
    `DROPPED_KEPT` of them; `dropped_more` counts the rest, which are not kept."""

    model_config = ConfigDict(frozen=True)

    status: Status
    last_activity_at: datetime
    expired_at: datetime
    generation: int = 0
    checkpoint: CheckpointPointer | None = None
    dropped: list[str] = Field(default_factory=list)
    dropped_more: int = 0


REFUSAL_TEXT = 300  # characters of a refused message its record keeps, to quote it
REFUSALS_NAMED = 10  # refused messages a record names; the rest it only counts


class Refusal(BaseModel):
    """A message the thread's full backlog refused (acknowledged, not kept), recorded in the
    write that refused it until the thread has been told (`Store.refusals_told`): a notice
    lost with its process is told by whoever serves the thread next."""

    model_config = ConfigDict(frozen=True)

    event_id: str
    user: str = ""
    text: str = Field(default="", max_length=REFUSAL_TEXT)
    at: datetime


class Conversation(BaseModel):
    """The per-thread record. Times are timezone-aware UTC."""

    key: ConversationKey
    status: Status = Status.IDLE
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    fence: int = 0
    checkpoint: CheckpointPointer | None = None
    next_seq: int = 0
    session_floor: int = 0
    summary_seq: int = Field(
        default=0,
        description="the session items before this sequence number are summed up in the "
        "conversation's summary (`Store.read_summary`); 0: it has none",
    )
    generation: int = Field(
        default=0,
        description="scopes the conversation's rows: a record recreated after its TTL starts "
        "a new generation and sees none of the old rows (0: rows written before generations)",
    )
    participants: frozenset[str] = Field(
        default=frozenset(), description="users who wrote in the conversation"
    )
    inbox_seq: int = Field(default=0, description="grows with every message queued")
    delivered_version: int = Field(
        default=0, description="checkpoint version whose outbox the cursor below refers to"
    )
    delivered_count: int | None = Field(
        default=None,
        description="entries of that outbox delivered, in order; None: all of them",
    )
    delivery_attempts: int = Field(default=0, description="failed delivery attempts so far")
    delivery_retry_at: datetime | None = Field(
        default=None, description="no redelivery before this instant (backoff)"
    )
    delivery_error: str | None = Field(
        default=None, description="why the last delivery failed (a Slack error code, ...)"
    )
    created_at: datetime
    updated_at: datetime
    last_activity_at: datetime
    expires_at: datetime
    counted: str | None = Field(
        default=None, description="the counter bucket the record is counted in (aws backend)"
    )
    stop_by: str | None = Field(
        default=None, description="who asked the run in progress to stop (cleared on release)"
    )
    feedback: FeedbackTally = Field(
        default_factory=lambda: FeedbackTally(),
        description="people's verdicts on its answers (one per person and answer)",
    )
    run_by: str | None = Field(
        default=None,
        description="who started the run in progress (or the last one), as the thread's "
        "holder wrote it (`Commit.run_by`); a keep names only a conversation's first author",
    )
    waiting_on: str | None = Field(
        default=None,
        description="while awaiting approval: the person it waits on (its run's starter, as "
        "the write that set the status named them); the approval index lists it for them",
    )
    waiting_since: datetime | None = Field(
        default=None, description="when it began waiting on `waiting_on`"
    )
    expired_from: Expiry | None = Field(
        default=None,
        description="set when the conversation's state expired and an event brought the "
        "thread back: what expired, until the thread has been told",
    )
    refused: list[Refusal] = Field(
        default_factory=list,
        description="messages refused at the backlog cap that the thread was not yet told "
        f"of, oldest first (at most {REFUSALS_NAMED} or so: the rest are `refused_more`)",
    )
    refused_more: int = Field(
        default=0, description="refused messages not yet told of, beyond those named"
    )
    inbox: list[InboxEntry] | None = Field(
        default=None,
        description="queued messages, when the read that returned the record included them "
        "(None: not read; see `Store.read_inbox`)",
        exclude=True,
    )

    @property
    def checkpoint_version(self) -> int:
        return self.checkpoint.version if self.checkpoint else 0

    def undelivered_from(self) -> int | None:
        """Index of the first outbox entry of the current checkpoint not yet delivered, or
        None when everything was delivered."""
        if self.checkpoint is None:
            return None
        if self.delivered_version < self.checkpoint.version:
            return 0
        if self.delivered_version == self.checkpoint.version and self.delivered_count is not None:
            return self.delivered_count
        return None

    @property
    def refusals_untold(self) -> bool:
        return bool(self.refused) or self.refused_more > 0

    def leased(self, now: datetime) -> bool:
        return self.lease_owner is not None and (
            self.lease_expires_at is None or self.lease_expires_at >= now
        )


class Lease(BaseModel):
    """Proof of holding one conversation. Every write made under it is fenced by `fence`."""

    model_config = ConfigDict(frozen=True)

    key: ConversationKey
    owner: str
    fence: int
    expires_at: datetime
    generation: int = 0
    counted: str | None = Field(
        default=None, description="the counter bucket the record was in when taken"
    )
    housekeeping: tuple[str, ...] = Field(
        default=(), description="attributes a write under this lease may drop (expired claims)"
    )
    stop_by: str | None = Field(
        default=None, description="set by a renewal when someone asked the run to stop"
    )
    summary_due: bool = Field(
        default=False,
        description="the conversation's summary would expire before its state: a turn's "
        "commit under this lease keeps it (where summaries expire, aws)",
    )

    @classmethod
    def held_in(
        cls, record: Conversation, housekeeping: tuple[str, ...] = (), *, summary_due: bool = False
    ) -> Lease:
        """The lease `record` says is held: by `lease_owner`, until `lease_expires_at`."""
        assert record.lease_owner is not None and record.lease_expires_at is not None
        return cls(
            key=record.key,
            owner=record.lease_owner,
            fence=record.fence,
            expires_at=record.lease_expires_at,
            generation=record.generation,
            counted=record.counted,
            housekeeping=housekeeping,
            summary_due=summary_due,
        )


class DeliveryMark(BaseModel):
    """Where delivery of a checkpoint's outbox stands: `count` entries of version
    `version`'s outbox were delivered (None: all). Failed attempts back off until `retry_at`;
    `error` says why the last one failed."""

    model_config = ConfigDict(frozen=True)

    version: int
    count: int | None = None
    attempts: int = 0
    retry_at: datetime | None = None
    error: str | None = None


SUMMARY_LIMIT = 40_000  # characters of a summary: well inside a DynamoDB item with its keys


class Summary(BaseModel):
    """What a model wrote of a conversation's session items before `through` (exclusive):
    the runtime gives it to the model in their place. Kept beside the history, never in it:
    the stored items stay exactly as the SDK wrote them."""

    model_config = ConfigDict(frozen=True)

    through: int = Field(gt=0)
    text: str = Field(max_length=SUMMARY_LIMIT)

    def applies_to(self, record: Conversation) -> bool:
        """Whether it is the summary `record` names, of items it still has."""
        return self.through == record.summary_seq and applies(record)


def applies(record: Conversation) -> bool:
    """Whether `record` names a summary of items it still has (a cleared session, or items
    popped below it, leave it nothing to stand for)."""
    return record.session_floor < record.summary_seq <= record.next_seq


class CheckpointMeta(BaseModel):
    """What the runtime states about a RunState it checkpoints."""

    model_config = ConfigDict(frozen=True)

    schema_version: str
    agent_fingerprint: str
    finished: bool = False


class ToolCallStatus(StrEnum):
    # Approved by the checkpoint commit that lets it run, not started yet: it may start
    # (`begin_tool_call` makes it `started`), or be cancelled; it has not run.
    APPROVED = "approved"
    STARTED = "started"
    COMPLETED = "completed"
    CANCELLED = "cancelled"  # approved or started, and never ran: a stop came first


class ToolCallRecord(BaseModel):
    """At-most-once ledger entry for one tool call id in one conversation."""

    key: ConversationKey
    call_id: str
    tool_name: str
    arguments: StoredText
    status: ToolCallStatus
    output: StoredText | None = None
    fence: int
    started_at: datetime
    completed_at: datetime | None = None
    attempts: int = Field(
        default=1, description="times it was started (a keyed call is run again after a crash)"
    )


class ToolCallClaim(BaseModel):
    """Result of trying to start a tool call: `created` when this claim started it (it was
    absent, or `approved` and not started); False when it was started or settled before."""

    record: ToolCallRecord
    created: bool


def with_refusal(record: Conversation, refusal: Refusal) -> Conversation:
    """The record once `refusal` is recorded: named while fewer than `REFUSALS_NAMED` are
    untold, else counted; `inbox_seq` moves, so that the holder's release sees it."""
    named = len(record.refused) < REFUSALS_NAMED
    return record.model_copy(
        update={
            "refused": [*record.refused, refusal] if named else record.refused,
            "refused_more": record.refused_more + (0 if named else 1),
            "inbox_seq": record.inbox_seq + 1,
        }
    )


def with_refusals_told(
    record: Conversation, event_ids: Sequence[str], counted: int
) -> Conversation:
    """The record once the thread was told of these refusals (see `Store.refusals_told`)."""
    told = set(event_ids)
    lowered = counted if record.refused_more >= counted else 0  # (below it: told twice)
    return record.model_copy(
        update={
            "refused": [r for r in record.refused if r.event_id not in told],
            "refused_more": record.refused_more - lowered,
        }
    )
