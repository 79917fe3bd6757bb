"""The storage contract, shared by the `local` and `aws` backends.

Consistency between the Session and checkpoints: session items are committed in the SAME
atomic write as the checkpoint pointer (one DynamoDB transaction; one sqlite transaction).
The runtime's session stages what the SDK appends during a turn and hands it to `commit`,
so a crash can never leave a turn's items without its checkpoint, or the reverse. Each
pointer also records the session watermark (`session_seq`) it was committed with.

Longer than the other modules on purpose: the whole contract both backends implement (26
abstract operations, each with the promise it keeps) reads best in one place (with the
installations', people's and replicas' parts in `installations`, `people` and
`replicas`).
"""

from __future__ import annotations

import base64
import contextlib
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from storage.codec import decode_state, encode_state
from storage.content import ContentBlobs
from storage.errors import BlobExists, SessionConflict
from storage.installations import InstallationRecords
from storage.models import (
    CheckpointMeta,
    CheckpointPointer,
    Conversation,
    ConversationKey,
    DeliveryMark,
    Expiry,
    FeedbackTally,
    InboxEntry,
    Lease,
    Status,
    ToolCallClaim,
    ToolCallRecord,
    ToolCallStatus,
    Verdict,
    utcnow,
)
from storage.people import PersonRecords
from storage.replicas import ReplicaBeats

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
# The statuses operational queries can find (idle conversations are not indexed).
INDEXED = tuple(status for status in Status if status is not Status.IDLE)
# The statuses `list_paused_in` finds: threads a person can resume.
PAUSED_IN_CHANNEL = (Status.AWAITING_APPROVAL, Status.INTERRUPTED)
PAUSED_PAGES = 4  # `list_paused_in` examines at most this many times its `limit`
WAITING_PAGES = 4  # `list_waiting_in` examines at most this many times its `limit`


class _Keep:
    """Marker: leave the checkpoint pointer as it is."""


KEEP = _Keep()


@dataclass(frozen=True)
class Kept:
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
    armed: tuple[str, ...] = ()  # call ids this write recorded as started (not seen before)


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
    arm: Sequence[ToolCallRecord] = ()  # calls this write records as started (ledger rows)
    delivered: bool = False  # every outcome of the (resulting) checkpoint was delivered
    delivery: DeliveryMark | None = None  # where delivery stands (overrides `delivered`)
    inbox_seen: int | None = None  # fail with InboxChanged if messages arrived since
    # Who started the run this write belongs to (None: unchanged). A write that sets the
    # status to awaiting approval lists the conversation for them (`list_waiting_on`).
    run_by: str | None = None
    clear_expiry: bool = False  # the thread was told its state expired (`expired_from`)
    clear_stop: bool = False  # a stop request was applied (`stop_by` goes)
    # Makes a retried write idempotent (DynamoDB's ClientRequestToken): a retry of a write
    # whose answer was lost is not applied twice, nor refused for its own earlier effect.
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        if len(self.consume) > CONSUME_LIMIT:
            raise ValueError(f"one commit consumes at most {CONSUME_LIMIT} inbox entries")


class Store(InstallationRecords, PersonRecords, ContentBlobs, ReplicaBeats, ABC):
    """Durable conversation state (and the application's installations, see
    `installations`; what it keeps of people, see `people`). Blocking calls: run them off
    the event loop. Bytes referred to by digest (files people shared) are kept by
    `put_content` / `get_content`."""

    def __init__(
        self,
        *,
        lease_duration: timedelta = timedelta(seconds=15),
        lease_skew: timedelta = timedelta(seconds=1),
        state_ttl: timedelta = timedelta(days=7),
        tombstone_ttl: timedelta = timedelta(days=90),
        event_ttl: timedelta = timedelta(days=1),
        claim_ttl: timedelta = timedelta(minutes=15),
        backlog_limit: int = BACKLOG_LIMIT,
        status_shards: int = 16,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.lease_duration = lease_duration
        self.lease_skew = lease_skew
        self.state_ttl = state_ttl
        self.tombstone_ttl = tombstone_ttl
        self.backlog_limit = backlog_limit
        self.event_ttl = event_ttl
        self.claim_ttl = claim_ttl
        self.status_shards = status_shards
        self.clock = clock

    # -- records and leases -------------------------------------------------------------

    @abstractmethod
    def get(self, key: ConversationKey) -> Conversation | None:
        """The conversation's record, or None (also when its state expired)."""

    @abstractmethod
    def expired_record(self, key: ConversationKey) -> Conversation | None:
        """The record of a conversation whose state expired, as it was (its status,
        participants, last activity), while its tombstone lasts (`tombstone_ttl` past the
        expiry); None when the conversation is live, never existed, or is long gone. The
        next `keep` in the thread brings it back (see `keep`)."""

    @abstractmethod
    def acquire(
        self,
        key: ConversationKey,
        owner: str,
        *,
        status: Status | None = None,
        force: bool = False,
        create: bool = True,
        takeover_from: str | None = None,
    ) -> tuple[Lease, Conversation]:
        """Take the lease when free or expired (past expiry plus the skew margin); the
        fencing token grows by one. Raises `LeaseBusy`. Taking a lease is not activity: it
        moves neither `last_activity_at` nor `expires_at`.
        `create` makes a missing (or expired) record; without it, raises `NotFound`.
        `force` takes it from a live holder (an admin's discard): fencing makes that safe,
        since every later write of the old holder is rejected. `takeover_from` takes it from
        that holder only, live or not (its process is known to be dead). Owners should be
        unique per acquisition: a retry that finds the lease held by this very `owner`
        (its first attempt landed, the answer was lost) gets that lease."""

    @abstractmethod
    def renew(self, lease: Lease) -> Lease:
        """Extend a held lease. Raises `LeaseLost`. The lease it returns carries `stop_by`
        when someone asked the run to stop."""

    def stop_requested(self, key: ConversationKey) -> str | None:
        """Who asked the run holding the thread to stop (`keep` with `stop_by`), if anyone:
        a cheap read that a holder polls while a run goes on."""
        record = self.get(key)
        return record.stop_by if record else None

    def release(
        self,
        lease: Lease,
        *,
        status: Status | None = None,
        inbox_seen: int | None = None,
        delivered: bool = False,
        delivery: DeliveryMark | None = None,
        touch: bool = True,
        run_by: str | None = None,
    ) -> Committed:
        """Give the lease up, optionally setting the status. Raises `LeaseLost`; with
        `inbox_seen`, raises `InboxChanged` (and keeps the lease) if messages arrived;
        `delivered` records that the current checkpoint's outcomes reached the user,
        `delivery` where their delivery stands instead; `run_by` as in `Commit`."""
        return self.apply(
            Commit(
                key=lease.key,
                lease=lease,
                status=status,
                release=True,
                inbox_seen=inbox_seen,
                delivered=delivered,
                delivery=delivery,
                touch=touch,
                run_by=run_by,
            )
        )

    def set_status(self, lease: Lease, status: Status, *, run_by: str | None = None) -> Committed:
        return self.apply(Commit(key=lease.key, lease=lease, status=status, run_by=run_by))

    # -- checkpoints --------------------------------------------------------------------

    def commit(
        self,
        lease: Lease,
        *,
        state: dict[str, Any] | str,
        meta: CheckpointMeta,
        expected_version: int,
        items: Sequence[str] = (),
        base_seq: int | None = None,
        status: Status | None = None,
        release: bool = False,
        consume: Sequence[str] = (),
        inbox_seen: int | None = None,
        arm: Sequence[ToolCallRecord] = (),
        run_by: str | None = None,
        clear_expiry: bool = False,
        clear_stop: bool = False,
    ) -> Committed:
        """Write the RunState blob write-once, then commit its pointer together with the
        staged session items, fenced and expecting `expected_version`.
        Raises `LeaseLost` or `CheckpointConflict`; an uncommitted blob is a harmless orphan."""
        encoded = encode_state(state)
        version = expected_version + 1
        # Content-addressed and fenced: a retried commit reuses its own blob, and writers
        # never collide on a key; the conditional pointer update alone decides who wins.
        object_key = (
            f"checkpoints/{lease.key.path}/"
            f"v{version:010d}-f{lease.fence}-{encoded.sha256[:16]}.json.gz"
        )
        inline = None
        if meta.finished and encoded.size <= INLINE_CHECKPOINT_LIMIT:
            # Nothing to resume from it: it travels in its pointer, with no object to write.
            inline = base64.b64encode(encoded.data).decode()
        else:
            self._put_blob_once(object_key, encoded.data)
        pointer = CheckpointPointer(
            inline=inline,
            object_key=object_key,
            version=version,
            sha256=encoded.sha256,
            size=encoded.size,
            schema_version=meta.schema_version,
            agent_fingerprint=meta.agent_fingerprint,
            created_at=self.clock(),
            fence=lease.fence,
            session_seq=0,  # filled in by the backend, inside the atomic write
            finished=meta.finished,
        )
        return self.apply(
            Commit(
                key=lease.key,
                lease=lease,
                items=items,
                base_seq=base_seq,
                checkpoint=pointer,
                expected_version=expected_version,
                status=status,
                release=release,
                consume=consume,
                inbox_seen=inbox_seen,
                arm=arm,
                run_by=run_by,
                clear_expiry=clear_expiry,
                clear_stop=clear_stop,
            )
        )

    def drop_checkpoint(
        self, lease: Lease, *, status: Status, release: bool = False
    ) -> CheckpointPointer | None:
        """Unset the pointer (fenced) and delete its blob; returns what was removed."""
        record = self.get(lease.key)
        pointer = record.checkpoint if record else None
        self.apply(
            Commit(
                key=lease.key,
                lease=lease,
                checkpoint=None,
                expected_version=pointer.version if pointer else 0,
                status=status,
                release=release,
            )
        )
        if pointer:
            self.delete_checkpoint(pointer)
        return pointer

    def delete_checkpoint(self, pointer: CheckpointPointer) -> None:
        """Delete a blob that is no longer (or never was) the committed checkpoint."""
        if pointer.inline is None:
            self._delete_blob(pointer.object_key)

    def load_checkpoint(self, pointer: CheckpointPointer) -> dict[str, Any]:
        """The verified RunState JSON. Raises a `CheckpointError` subtype."""
        if pointer.inline is not None:
            return decode_state(pointer, base64.b64decode(pointer.inline))
        return decode_state(pointer, self._get_blob(pointer.object_key))

    # -- session ------------------------------------------------------------------------

    @abstractmethod
    def read_items(self, key: ConversationKey, limit: int | None = None) -> SessionPage:
        """The latest `limit` items (all when None), oldest first, as stored JSON strings."""

    def append_items(
        self, key: ConversationKey, items: Sequence[str], lease: Lease | None = None
    ) -> Committed:
        """Append atomically, all or nothing (fenced when a lease is given). Concurrent
        appenders race on the sequence number; the loser retries on the new one."""
        for _ in range(APPEND_ATTEMPTS - 1):
            try:
                return self.apply(Commit(key=key, lease=lease, items=items))
            except SessionConflict:
                continue
        return self.apply(Commit(key=key, lease=lease, items=items))

    @abstractmethod
    def pop_item(self, key: ConversationKey, lease: Lease | None = None) -> str | None:
        """Remove and return the newest item."""

    @abstractmethod
    def clear_items(self, key: ConversationKey, lease: Lease | None = None) -> None:
        """Hide every item at once (a floor moves up), then delete the rows."""

    # -- inbox --------------------------------------------------------------------------

    @abstractmethod
    def keep(
        self,
        key: ConversationKey,
        event_id: str,
        payload: str,
        *,
        create: bool = True,
        participant: str | None = None,
        owner: str | None = None,
        token: str | None = None,
        stop_by: str | None = None,
        refusal_text: str = "",
    ) -> Kept:
        """Keep a user message durably, claiming its event id (per conversation, for at least
        `claim_ttl`: longer than Slack retries an event) in the same atomic write; marks the
        conversation `running` (it has work), bumps `inbox_seq` and adds `participant` to its
        participants. With `owner`, the same write also takes the lease if it is free
        (`Kept.lease`), and the record comes back with its inbox, so that serving the
        message needs no further read. Nothing is written when the event id was claimed
        before (`Kept.kept` is False), nor when `backlog_limit` messages are queued already
        (`Kept.refused`; the event is claimed all the same, and a duplicate of a message
        kept is a duplicate, not refused). Without `create`, only an existing conversation takes it;
        otherwise raises `NotFound` (and claims nothing). A conversation whose state expired
        but whose tombstone lasts is brought back, with or without `create`, as a new
        generation (none of the old rows is seen) that keeps its participants and says what
        expired (`Conversation.expired_from`, until a commit clears it). Retrying with the
        same `token` after an unanswered attempt is not mistaken for a duplicate. The cost of
        one keep does not grow with the backlog. With `stop_by`, the message is a request to
        stop the run: the same write sets `stop_by` on the record, for the holder to see at
        once (`stop_requested`, `renew`); a release or a commit with `clear_stop` removes it,
        and neither can pass over the message itself (it is in the inbox). A refusal is
        recorded on the record in the same write (`Conversation.refused`: `participant` and
        the first `REFUSAL_TEXT` characters of `refusal_text`, for the first
        `REFUSALS_NAMED` untold; later ones only counted, `Kept.named` False), and bumps
        `inbox_seq`, so that a holder's release sees it, until `refusals_told`."""

    @abstractmethod
    def refusals_told(
        self, key: ConversationKey, event_ids: Sequence[str], counted: int = 0
    ) -> None:
        """The thread was told of these refusals: the named ones (by event id) and `counted`
        of those only counted are no longer untold; a count below `counted` (told twice) is
        left as it is. No lease needed."""

    def enqueue(
        self,
        key: ConversationKey,
        event_id: str,
        payload: str,
        *,
        create: bool = True,
        participant: str | None = None,
        token: str | None = None,
    ) -> bool:
        """`keep` without taking the lease; True when kept, False for a duplicate."""
        return self.keep(
            key, event_id, payload, create=create, participant=participant, token=token
        ).kept

    @abstractmethod
    def read_inbox(
        self, key: ConversationKey, generation: int | None = None, limit: int | None = None
    ) -> list[InboxEntry]:
        """Queued messages, oldest first (the oldest `limit` when given; reading them costs
        no more than that however long the backlog). Commits consume them
        (`Commit.consume`). With `generation`, entries left by an earlier, expired record
        are left out."""

    # -- ledgers ------------------------------------------------------------------------

    @abstractmethod
    def claim_event(self, event_id: str) -> bool:
        """True for the first claim of a Slack event id (until `event_ttl`), False after."""

    @abstractmethod
    def begin_tool_call(
        self, lease: Lease, call_id: str, tool_name: str, arguments: str
    ) -> ToolCallClaim:
        """Record that a tool call starts, once per call id (fenced)."""

    @abstractmethod
    def complete_tool_call(
        self,
        lease: Lease,
        call_id: str,
        output: str,
        *,
        status: ToolCallStatus = ToolCallStatus.COMPLETED,
    ) -> bool:
        """Record a started call's result: one write, fenced by the lease (True), or, once
        the lease was taken from the writer (a discard, a takeover), by the fence the call
        was started under (False): only that writer ran it, so only it knows the result.
        Raises `LeaseLost` when neither holds. With status `CANCELLED`: it was recorded as
        started but never ran (a stop came first)."""

    @abstractmethod
    def retry_tool_call(
        self, lease: Lease, call_id: str, *, max_attempts: int
    ) -> ToolCallRecord | None:
        """Start again a call whose outcome is unknown (a keyed tool: the service it calls
        deduplicates by the call's key): fenced, and conditional on the call still being
        `started` after fewer than `max_attempts` attempts; the call is then this lease's
        (its fence) and its attempts grow by one. None when it is not `started` any more
        or its attempts are spent: it is not run again."""

    @abstractmethod
    def get_tool_call(
        self, key: ConversationKey, call_id: str, generation: int | None = None
    ) -> ToolCallRecord | None:
        """The ledger entry of `call_id` in the conversation's current generation (read from
        the record unless given)."""

    # -- operational queries ------------------------------------------------------------

    @abstractmethod
    def list_by_status(
        self, status: Status, *, idle_for: timedelta | None = None, limit: int = 100
    ) -> list[Conversation]:
        """Conversations in `status`, least recently active first, through an index.
        Idle conversations are not indexed: listing them finds nothing."""

    @abstractmethod
    def count_by_status(self) -> dict[Status, int]: ...

    @abstractmethod
    def list_by_team(
        self,
        team: str | None,
        *,
        enterprise: str | None = None,
        statuses: Sequence[Status] = INDEXED,
        limit: int = 1000,
    ) -> list[Conversation]:
        """Conversations in one of `statuses` (never idle) whose key names `team` and
        `enterprise` (None: a key without one); with `team` None, those of every team of
        `enterprise`. Least recently active first. A rare operator query (a workspace that
        uninstalled the app): it may read every conversation in those statuses."""

    @abstractmethod
    def list_paused_in(
        self,
        team: str,
        channel: str,
        *,
        enterprise: str | None = None,
        participant: str | None = None,
        limit: int = 50,
    ) -> list[Conversation]:
        """Conversations awaiting approval or interrupted (`PAUSED_IN_CHANNEL`) in one
        channel of one workspace (`team`, and `enterprise` as the key names it: None for a
        key without one), most recently active first, at most `limit`; with `participant`,
        only those that person wrote in. Expired conversations are never listed, nor
        values that could not be parts of a key. Bounded cost whatever the store holds
        elsewhere: it reads only that channel's paused threads, through an index of them,
        and examines at most `limit * PAUSED_PAGES` of the most recently active (aws: at
        most `PAUSED_PAGES` queries of `limit` index entries each). So with `participant`,
        a thread of theirs behind that many newer paused threads of others in the channel
        is not listed."""

    @abstractmethod
    def list_waiting_on(
        self, team: str, user: str, *, enterprise: str | None = None, limit: int = 20
    ) -> list[Conversation]:
        """Conversations of one workspace awaiting approval that wait on `user`: the write
        that set the status named them as the run's starter (`Commit.run_by`; a write that
        names nobody leaves the listing as it was, and any other status takes the
        conversation out). The most recently waiting first, at most `limit`; never expired
        ones, nor values that could not be parts of a key. Bounded cost: one query of that
        person's entries in an index of waiting conversations, whatever the store holds."""

    @abstractmethod
    def list_waiting_in(
        self, team: str, *, enterprise: str | None = None, limit: int = 50
    ) -> list[Conversation]:
        """Every conversation of one workspace awaiting approval and listed for someone
        (see `list_waiting_on`): for those who may decide any of them. At most `limit`, the
        most recently waiting first among those examined: at most `limit * WAITING_PAGES`
        index entries of that workspace (aws: at most `WAITING_PAGES` queries), so in a
        workspace with more waiting than that, some are not listed."""

    # -- feedback on answers ------------------------------------------------------------

    @abstractmethod
    def record_feedback(
        self, key: ConversationKey, answer: str, user: str, verdict: Verdict
    ) -> FeedbackTally | None:
        """`user`'s verdict on the answer `answer` (its outbox id) of a conversation. One
        verdict per person and answer: clicking again changes it, and the conversation's
        tally (returned) and the overall one move with it. None when the conversation is
        gone (expired or never existed): nothing is recorded."""

    @abstractmethod
    def count_feedback(self) -> FeedbackTally:
        """Verdicts over all conversations, since the store was created."""

    # -- the atomic write every mutation goes through -----------------------------------

    @abstractmethod
    def apply(self, commit: Commit) -> Committed:
        """Apply `commit` atomically. Raises `LeaseLost`, `CheckpointConflict`,
        `SessionConflict` (items staged against a stale `base_seq`) or `InboxChanged`."""

    # -- blobs --------------------------------------------------------------------------

    @abstractmethod
    def _put_blob(self, object_key: str, data: bytes) -> None:
        """Create-only write; raises `BlobExists` if the object is there."""

    def _put_blob_once(self, object_key: str, data: bytes) -> None:
        """Write a content-addressed blob; one already there holds these very bytes."""
        with contextlib.suppress(BlobExists):
            self._put_blob(object_key, data)

    @abstractmethod
    def _get_blob(self, object_key: str) -> bytes:
        """Raises `CheckpointMissing`."""

    @abstractmethod
    def _delete_blob(self, object_key: str) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    # -- helpers shared by backends -----------------------------------------------------

    def tombstone_until(self, record: Conversation) -> datetime:
        """When the record itself goes (its state expired a `tombstone_ttl` earlier)."""
        return record.expires_at + self.tombstone_ttl

    def revived(
        self, old: Conversation, now: datetime, dropped: Sequence[str] = ()
    ) -> Conversation:
        return revived(old, now, state_ttl=self.state_ttl, dropped=dropped)

    def new_record(self, key: ConversationKey, now: datetime) -> Conversation:
        return new_record(key, now, state_ttl=self.state_ttl)

    def takeover_cutoff(self, now: datetime) -> datetime:
        """A lease that expired before this instant may be taken over."""
        return now - self.lease_skew


def new_record(key: ConversationKey, now: datetime, *, state_ttl: timedelta) -> Conversation:
    return Conversation(
        key=key,
        generation=int(now.timestamp() * 1000),
        created_at=now,
        updated_at=now,
        last_activity_at=now,
        expires_at=now + state_ttl,
    )


def revived(
    old: Conversation, now: datetime, *, state_ttl: timedelta, dropped: Sequence[str] = ()
) -> Conversation:
    """The record that replaces one whose state expired: a new generation (no old row is
    seen) with the old participants, fence and message counter, saying what expired.
    `dropped` are payloads of messages that were queued and never answered."""
    return new_record(old.key, now, state_ttl=state_ttl).model_copy(
        update={
            "fence": old.fence,
            "inbox_seq": old.inbox_seq,
            "participants": old.participants,
            "expired_from": Expiry(
                status=old.status,
                last_activity_at=old.last_activity_at,
                expired_at=old.expires_at,
                generation=old.generation,
                checkpoint=old.checkpoint,
                dropped=list(dropped)[:DROPPED_KEPT],
            ),
        }
    )
