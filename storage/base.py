"""The storage contract, shared by the `local` and `aws` backends. `Store` hands each call
to a backend's part, written once for both (each part typed by a small protocol, `...Part`),
so that a backend gives its parts, its error translation (`translating`) and only what is
truly its own: construction, `close`, and making calls on the caller's thread.

Consistency between the Session and checkpoints: session items are committed in the SAME
atomic write as the checkpoint pointer (one DynamoDB transaction; one sqlite transaction).
The runtime's session stages what the SDK appends during a turn and hands it to `commit`,
so a crash can never leave a turn's items without its checkpoint, or the reverse. Each
pointer also records the session watermark (`session_seq`) it was committed with.
"""

from __future__ import annotations

import base64
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol, TypeVar

from storage.codec import decode_state, encode_state
from storage.content import ContentBlobs
from storage.errors import BlobExists, SessionConflict, WouldWait
from storage.inbox import ConversationInbox
from storage.installations import InstallationRecords
from storage.ledger import ToolLedger
from storage.listings import ConversationListings
from storage.models import (
    CheckpointMeta,
    CheckpointPointer,
    Conversation,
    ConversationKey,
    DeliveryMark,
    Lease,
    Status,
    Summary,
    ToolCallRecord,
    utcnow,
)
from storage.people import PersonKey, PersonRecords
from storage.policies import Policies
from storage.replicas import ReplicaBeats
from storage.writes import (
    APPEND_ATTEMPTS,
    INLINE_CHECKPOINT_LIMIT,
    Commit,
    Committed,
    LeaseRequest,
    SessionPage,
)

R = TypeVar("R")


class RecordsPart(Protocol):
    """A backend's conversation records and their leases."""

    def get(self, key: ConversationKey) -> Conversation | None: ...

    def expired_record(self, key: ConversationKey) -> Conversation | None: ...

    def acquire(self, request: LeaseRequest) -> tuple[Lease, Conversation]: ...

    def renew(self, lease: Lease, *, working: bool) -> Lease: ...

    def stop_requested(self, key: ConversationKey) -> str | None: ...


class CommitsPart(Protocol):
    """A backend's one atomic write."""

    def apply(self, commit: Commit) -> Committed: ...


class HistoryPart(Protocol):
    """A backend's session items."""

    def read_items(self, key: ConversationKey, limit: int | None) -> SessionPage: ...

    def pop_item(self, key: ConversationKey, lease: Lease | None) -> str | None: ...

    def clear_items(self, key: ConversationKey, lease: Lease | None) -> None: ...


class SummariesPart(Protocol):
    """A backend's conversation summaries (kept beside the history)."""

    def read_summary(self, record: Conversation) -> Summary | None: ...


class BlobsPart(Protocol):
    """A backend's objects: checkpoints, offloaded items and outputs, shared files."""

    def put_new(self, object_key: str, data: bytes) -> None: ...

    def refresh(self, object_key: str, data: bytes) -> None: ...

    def get(self, object_key: str) -> bytes: ...

    def delete(self, object_key: str) -> None: ...


class Store(
    ConversationInbox,
    ToolLedger,
    ConversationListings,
    InstallationRecords,
    PersonRecords,
    ContentBlobs,
    ReplicaBeats,
    Policies,
    ABC,
):
    """Durable conversation state (and the application's installations, see
    `installations`; what it keeps of people, see `people`). Blocking calls: async code
    makes them through `StorageCalls`, off the event loop unless `run_here` makes one at
    once. Bytes referred to by digest (files people shared) are kept by `put_content` /
    `get_content`. Its policies (TTLs, leases, the backlog cap: `Policies`) are the
    keyword arguments it is made with, beside `clock`.

    A backend gives a part for each attribute typed by a `...Part` protocol, here and in the
    faces this class is made of, and `translating`, the context each call of a part is made
    in, so that the backend's own failures leave it as the contract's errors."""

    records: RecordsPart
    commits: CommitsPart
    history: HistoryPart
    summaries: SummariesPart
    blobs: BlobsPart
    translating: AbstractContextManager[None]

    def __init__(self, *, clock: Callable[[], datetime] = utcnow, **policies: Any) -> None:
        Policies.__init__(self, **policies)
        self.clock = clock

    # -- records and leases -------------------------------------------------------------

    def get(self, key: ConversationKey) -> Conversation | None:
        """The conversation's record, or None (also when its state expired)."""
        with self.translating:
            return self.records.get(key)

    def expired_record(self, key: ConversationKey) -> Conversation | None:
        """The record of a conversation whose state expired, as it was (its status,
        participants, last activity), while its tombstone lasts (`tombstone_ttl` past the
        expiry); None when the conversation is live, never existed, or is long gone. The
        next `keep` in the thread brings it back (see `keep`)."""
        with self.translating:
            return self.records.expired_record(key)

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
        with self.translating:
            request = LeaseRequest(key, owner, status, force, create, takeover_from)
            return self.records.acquire(request)

    def renew(self, lease: Lease, *, working: bool = False) -> Lease:
        """Extend a held lease. Raises `LeaseLost`. The lease it returns carries `stop_by`
        when someone asked the run to stop. `working`: a run is in progress, which is
        activity: the state's expiry moves as a commit's does (its last activity stays at
        the last commit); a state that expired already is lost (`LeaseLost`)."""
        with self.translating:
            return self.records.renew(lease, working=working)

    def run_here(self, call: Callable[[], R]) -> R:
        """`call()` on the calling thread (the event loop's), when it is one of this store's
        quick calls and needs no wait; else `WouldWait`, and the caller makes it on a worker
        thread. A store over the network always waits, so this one never runs a call."""
        raise WouldWait("every call of this store waits on the network")

    # Whether `run_here` and `run_together` ever make a call (an embedded store's do).
    runs_calls_here = False

    def run_together(self, calls: Sequence[Callable[[], R]]) -> list[R | Exception]:
        """`calls` made at once on the calling thread, as one write (one commit for all,
        each undone alone when it fails): each call's result or the error it raised, in
        order; `WouldWait` for the whole when they cannot be made here (see `run_here`)."""
        raise WouldWait("every call of this store waits on the network")

    def stop_requested(self, key: ConversationKey) -> str | None:
        """Who asked the run holding the thread to stop (`keep` with `stop_by`), if anyone:
        a cheap read that a holder polls while a run goes on."""
        with self.translating:
            return self.records.stop_requested(key)

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
        note: PersonKey | None = None,
    ) -> Committed:
        """Give the lease up, optionally setting the status. Raises `LeaseLost`; with
        `inbox_seen`, raises `InboxChanged` (and keeps the lease) if messages arrived;
        `delivered` records that the current checkpoint's outcomes reached the user,
        `delivery` where their delivery stands instead; `run_by` and `note` as in
        `Commit`."""
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
                note=note,
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
        summary: Summary | None = None,
    ) -> Committed:
        """Write the RunState blob write-once, then commit its pointer together with the
        staged session items (and the conversation's new `summary`, if any), fenced and
        expecting `expected_version`.
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
            self.put_blob_once(object_key, encoded.data)
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
                summary=summary,
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
            self.delete_blob(pointer.object_key)

    def load_checkpoint(self, pointer: CheckpointPointer) -> dict[str, Any]:
        """The verified RunState JSON. Raises a `CheckpointError` subtype."""
        if pointer.inline is not None:
            return decode_state(pointer, base64.b64decode(pointer.inline))
        return decode_state(pointer, self.get_blob(pointer.object_key))

    # -- session ------------------------------------------------------------------------

    def read_items(self, key: ConversationKey, limit: int | None = None) -> SessionPage:
        """The latest `limit` items (all when None), oldest first, as stored JSON strings."""
        with self.translating:
            return self.history.read_items(key, limit)

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

    def pop_item(self, key: ConversationKey, lease: Lease | None = None) -> str | None:
        """Remove and return the newest item."""
        with self.translating:
            return self.history.pop_item(key, lease)

    def clear_items(self, key: ConversationKey, lease: Lease | None = None) -> None:
        """Hide every item at once (a floor moves up), then delete the rows."""
        with self.translating:
            self.history.clear_items(key, lease)

    def read_summary(self, record: Conversation) -> Summary | None:
        """The summary `record` names, or None: it names none, it stands for items that
        are gone (a cleared session), or it expired with the conversation's other rows.
        A summary is what a model wrote of a long conversation's earlier items, kept beside
        the history (never in it) and given to the model in their place. The checkpoint
        commit that first gives it to the model writes it (`Commit.summary`), in the same
        atomic write, replacing the one before; the record names it
        (`Conversation.summary_seq`), so a conversation that has none costs no read."""
        with self.translating:
            return self.summaries.read_summary(record)

    # -- the atomic write every mutation goes through -----------------------------------

    def apply(self, commit: Commit) -> Committed:
        """Apply `commit` atomically. Raises `LeaseLost`, `CheckpointConflict`,
        `SessionConflict` (items staged against a stale `base_seq`) or `InboxChanged`."""
        with self.translating:
            return self.commits.apply(commit)

    # -- blobs --------------------------------------------------------------------------
    # The object primitives each backend implements under checkpoints, history and the
    # ledger; public because they are part of what a backend is, and what a crash test wraps.

    def put_blob(self, object_key: str, data: bytes) -> None:
        """Create-only write; raises `BlobExists` if the object is there."""
        with self.translating:
            self.blobs.put_new(object_key, data)

    def put_blob_once(self, object_key: str, data: bytes) -> None:
        """Write a content-addressed blob; one already there holds these very bytes."""
        with contextlib.suppress(BlobExists):
            self.put_blob(object_key, data)

    def refresh_blob(self, object_key: str, data: bytes) -> None:
        """Write the content-addressed object, or, when it is there already (the same
        bytes, by its name), make it count as written now."""
        with self.translating:
            self.blobs.refresh(object_key, data)

    def get_blob(self, object_key: str) -> bytes:
        """Raises `CheckpointMissing`."""
        with self.translating:
            return self.blobs.get(object_key)

    def delete_blob(self, object_key: str) -> None:
        with self.translating:
            self.blobs.delete(object_key)

    @abstractmethod
    def close(self) -> None: ...
