"""Holding one thread's lease while it is served: passes until nothing is left to do, then
the release, which records what the thread is left as (`release_as`) and is conditioned
on the inbox (`InboxChanged` sends the serve round again). A fault or a cancellation gives
the thread up at once, as `interrupted` or `running`, so that nothing kept is passed over.
What one pass does is `Serving.step`."""

from __future__ import annotations

import asyncio
import logging
from abc import abstractmethod
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from bot.runtime.delivery import Outbox
from bot.runtime.envelope import UserMessage, parse_payload
from bot.runtime.outcomes import ApprovalRequest, AwaitingDecision, Notice, NoticeKind, Outcome
from bot.runtime.references import new_reference
from bot.runtime.slots import Slots
from storage import (
    CONSUME_LIMIT,
    Conversation,
    InboxChanged,
    InboxEntry,
    Lease,
    LeaseKeeper,
    LeaseLost,
    PersonKey,
    Status,
    StorageUnavailable,
    Store,
)
from storage.calls import StorageCalls

log = logging.getLogger("bot.runtime.serving")  # the serve's lines (testkit listens to them)
# What a run stopped by a fault says: why, and what happens when its inbox is owed an answer.
STORAGE_DOWN = (
    "I lost contact with my storage, so I stopped here.",
    "I'll pick this up again as soon as it answers.",
)
# A serve that waits this long before letting go, and posts nothing meanwhile, does not
# date the thread's activity to its release: its last commit did (the state would outlive
# its TTL by the wait).
QUIET_WAIT = timedelta(seconds=1)
FAILED_HERE = ("Something went wrong on my side, so I stopped here.", "I'll try again shortly.")


class Holding:
    """The lease and what its release records; `Serving` says what each pass does."""

    def __init__(
        self,
        store: Store,
        io: StorageCalls,
        lease: Lease,
        record: Conversation,
        *,
        outbox: Outbox,
        admission: Slots,
        by_recovery: bool,
        note: PersonKey | None = None,
    ) -> None:
        self.store = store
        self.io = io
        self.key = record.key
        self.record = record
        self.initial_lease = lease
        self.keeper: LeaseKeeper | None = None
        self.outbox = outbox
        self.admission = admission  # others waiting for a slot: a thread yields its own
        self.outcomes: list[Outcome] = []
        self.final_status: Status = Status.IDLE  # what the release leaves the thread as
        self.by_recovery = by_recovery  # a recovery sweep's serve
        self.yielded = False  # gave its slot to threads waiting (more arrived meanwhile)
        self.active = False  # something was committed: the release counts as activity
        self.more = False  # the inbox holds more than one commit may consume
        self.again = False  # this pass set the state aside: look at the inbox once more
        self.stopped = False  # stopped for a graceful shutdown: release as `running`
        self.waiting_on: str | None = None  # the person a decision waits on (see below)
        self.read: set[str] = set()  # the inbox entries this serve's passes have read
        # Who opened the conversation, to be noted by the release (`Store.release(note=)`).
        self.note = note

    @abstractmethod
    async def step(self) -> None:
        """One pass: read the inbox and the checkpoint, and do what they ask."""

    @abstractmethod
    async def end_showing(self) -> None:
        """Progress: done here (before the lease goes)."""

    @abstractmethod
    async def _tell_refusals(self, *, idle: bool) -> bool:
        """Tell the thread of messages refused at the backlog cap; whether it was told."""

    # -- what the release records ------------------------------------------------------

    def release_as(self, status: Status) -> None:
        """When nothing is left to do, the thread is released as `status`."""
        self.final_status = status

    def await_decision(self, started_by: str) -> None:
        """The run waits for a decision: released as awaiting approval, listed for the
        person who started it (`Store.list_waiting_on`)."""
        self.release_as(Status.AWAITING_APPROVAL)
        self.waiting_on = started_by or None

    def look_again(self, when: bool = True) -> None:
        """Whether the serve reads the inbox once more after this pass."""
        self.again = when

    def give_back(self) -> None:
        """Released as `running`, its messages queued: another process continues it."""
        self.stopped = True

    @property
    def lease(self) -> Lease:
        return self.keeper.lease if self.keeper else self.initial_lease

    def check(self) -> None:
        if self.keeper:
            self.keeper.check()

    def ask_stop(self, user: str) -> None:
        """A stop was kept for this thread: the run learns of it at once."""
        if self.keeper is not None:
            self.keeper.ask_stop(user)

    @property
    def stop_asked(self) -> bool:
        return self.keeper is not None and self.keeper.stop.is_set()

    # -- the session --------------------------------------------------------------------

    async def run(self, opening: Callable[[], Awaitable[None]] | None = None) -> list[Outcome]:
        """Serve until nothing is left; `opening` replaces the first pass (e.g. a discard)."""
        async with LeaseKeeper(self.store, self.initial_lease, calls=self.io) as keeper:
            self.keeper = keeper
            try:
                await self._loop(opening)
            except LeaseLost:
                log.warning("lost the lease on %s; another process continues", self.key)
                await self.outbox.recheck()
            except StorageUnavailable as exc:
                await self._stopped_by_fault(exc, STORAGE_DOWN)
            except Exception as exc:  # a defect: logged, and the thread is not left held
                await self._stopped_by_fault(exc, FAILED_HERE)
            except asyncio.CancelledError:
                await self._release_quietly()
                raise
            finally:
                await self.end_showing()
        return self.outcomes

    async def _loop(self, opening: Callable[[], Awaitable[None]] | None) -> None:
        while True:
            if opening is not None:
                await opening()
                opening = None
            else:
                await self.step()
            if (self.more or self.again) and not self.stopped:
                self.again = False
                continue
            await self.outbox.deliver()
            await self.end_showing()
            quiet = True  # a wait that posted nothing is no activity (chaos 180065)
            if self.record.refusals_untold and not self.stopped:  # none left untold
                began = self.store.clock()
                posted = await self._tell_refusals(idle=True)
                quiet = posted or self.store.clock() - began < QUIET_WAIT
            left = self.stopped or self.outbox.pending
            status = Status.RUNNING if left else self.final_status
            waiting = status is Status.AWAITING_APPROVAL
            try:
                await self._release(
                    status=status,
                    inbox_seen=None if self.stopped else self.record.inbox_seq,
                    delivery=self.outbox.mark(),
                    # A delivery still owed keeps the state alive for its retry.
                    touch=(self.active and quiet) or self.outbox.pending,
                    run_by=self.waiting_on if waiting else None,
                )
                if waiting:
                    await self._now_listed()
                return
            except InboxChanged:
                if self.admission.others_waiting and status is Status.IDLE:  # one run each
                    await self._yield_slot()
                    return
                fresh = await self.io(self.store.get, self.key)
                if fresh is None:
                    return
                self.record = fresh

    async def _now_listed(self) -> None:
        """Released awaiting a decision on the request this serve delivered: listings show
        it only now, so surfaces that list approvals are told now (not with the request's
        post, which comes before this release: a listing read then misses it)."""
        request = next((o for o in reversed(self.outcomes) if isinstance(o, ApprovalRequest)), None)
        if request is not None:
            await self.outbox.emit_now(
                AwaitingDecision(
                    key=self.key, requested_by=request.requested_by, approvers=request.approvers
                )
            )

    async def _release(self, **how: Any) -> None:
        """The release (`Store.release`), noting the conversation for `note` the first
        time it lands."""
        await self.io(self.store.release, self.lease, note=self.note, **how)
        self.note = None

    async def _yield_slot(self) -> None:
        """Messages arrived during the run while other threads wait for a slot: the thread
        goes back in line, given up as `running` with its new messages in the inbox."""
        await self._release(status=Status.RUNNING, delivery=self.outbox.mark(), touch=self.active)
        self.yielded = True

    async def _release_quietly(self) -> None:
        """Cancelled (shutdown past its grace): give the thread up at once, as `running`, so
        that the next process continues it without waiting for the lease to expire."""
        try:
            await asyncio.wait_for(
                self._release(status=Status.RUNNING, delivery=self.outbox.mark(), touch=False),
                timeout=5,
            )
        except Exception:
            log.warning("%s: could not release the lease on shutdown", self.key, exc_info=True)

    async def _stopped_by_fault(self, exc: Exception, said: tuple[str, str]) -> None:
        """Storage failed through every retry, or an unexpected error: the run stops here,
        its checkpoint intact. The thread waits, interrupted, for a person's `/resume` or
        next message, unless its inbox holds what that notice does not answer (`_owed`):
        then it is given up as `running`, and the recovery sweep serves it later (no
        release may pass over a message or a stop)."""
        reference = new_reference()
        if isinstance(exc, StorageUnavailable):
            log.error("%s [%s]: storage unavailable, run stopped: %s", self.key, reference, exc)
        else:
            log.error("%s [%s]: run stopped by an error", self.key, reference, exc_info=exc)
        status: Status | None = None
        try:
            status = await self._give_up_after_fault()
        except Exception:  # still down: the lease expires, and recovery tries again later
            log.warning("%s [%s]: could not record the interruption", self.key, reference)
        if status is not Status.INTERRUPTED and self.by_recovery:
            return  # a sweep's attempt: the thread was told when its run first stopped
        what, later = said
        after = (
            "send a message or use /resume to continue." if status is Status.INTERRUPTED else later
        )
        notice = Notice(
            key=self.key,
            kind=NoticeKind.RUN_FAILED,
            text=f"{what} Nothing was lost; {after}",
            reference=reference,
        )
        self.outcomes.append(notice)
        if status is not None:  # else nothing could be written: it is not posted either
            await self.outbox.emit_now(notice)

    async def _give_up_after_fault(self) -> Status:
        """Release the thread as `interrupted` when nothing in its inbox is owed an answer
        (the inbox read after the record, the release conditioned on the record's inbox
        counter, so that nothing kept meanwhile is passed over); else, or when storage
        cannot say, as `running`."""
        try:
            inbox: list[InboxEntry] = []
            record = await self.io(self.store.get, self.key)
            if record is not None:
                generation, limit = record.generation, CONSUME_LIMIT + 1
                inbox = await self.io(self.store.read_inbox, self.key, generation, limit)
        except StorageUnavailable:
            record, inbox = None, []  # nobody can tell what waits: recovery looks again
        if record is not None and not any(self._owed(entry) for entry in inbox):
            try:
                await self._release(
                    status=Status.INTERRUPTED, inbox_seen=record.inbox_seq, touch=False
                )
                return Status.INTERRUPTED
            except InboxChanged:
                pass  # kept just now: it is owed an answer
        await self._release(status=Status.RUNNING, touch=False)
        return Status.RUNNING

    def _owed(self, entry: InboxEntry) -> bool:
        """An inbox entry that the storage notice does not answer: a message this serve never
        read (sent after it looked), or a request to act (a stop, a decision) that it could
        not carry out. The messages it read are its run's, continued by `/resume`."""
        if entry.entry_id not in self.read:
            return True
        try:
            return not isinstance(parse_payload(entry.payload), UserMessage)
        except ValueError:  # unreadable: dropped by the next pass that reads it
            return False
