"""Serving one thread while holding its lease: until nothing is left to do.

Each pass reads the inbox (messages and decisions, in arrival order) and the checkpoint,
delivers what the thread is still owed, then either applies decisions to a paused run,
continues a run, or starts one. The lease is released only when the inbox has nothing new
(`InboxChanged` sends us round again), with the delivery cursor, and as `running` when work
is left (a failed delivery, a graceful shutdown) so that recovery picks the thread up."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from agents import RunState, TResponseInputItem

from bot import metrics
from bot.runtime import approvals, expiry, not_taken, stopping, trust
from bot.runtime.delivery import Outbox
from bot.runtime.driver import drive
from bot.runtime.envelope import (
    AwaitingCall,
    DecisionMade,
    DecisionRequest,
    Envelope,
    HeldMessage,
    Probe,
    StopRequest,
    UserMessage,
    parse_payload,
)
from bot.runtime.mcp_servers import paused_for
from bot.runtime.model_input import render
from bot.runtime.outcomes import Notice, NoticeKind, Outcome, Refused
from bot.runtime.progress import shown
from bot.runtime.references import new_reference
from storage import (
    CONSUME_LIMIT,
    KEEP,
    CheckpointError,
    Commit,
    Conversation,
    InboxChanged,
    InboxEntry,
    Lease,
    LeaseKeeper,
    LeaseLost,
    Status,
    StorageUnavailable,
    ToolCallRecord,
    ToolCallStatus,
)

if TYPE_CHECKING:
    from bot.runtime.runtime import ConversationRuntime

log = logging.getLogger(__name__)
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


class Entries:
    """One pass's share of the inbox, parsed, in arrival order (probes left out: they only
    bring a thread back, and are consumed with the rest)."""

    def __init__(self, inbox: list[InboxEntry]) -> None:
        self.ids = [entry.entry_id for entry in inbox]
        self.items: list[UserMessage | DecisionRequest] = []
        self.item_ids: list[str] = []  # the entry id of each item
        self.arrived: list[datetime] = []  # when each item was kept
        self.stops: list[StopRequest] = []  # requests to stop the run (in arrival order)
        self.stop_ids: list[str] = []
        self.stop_arrived: list[datetime] = []
        for entry in inbox:
            try:
                payload = parse_payload(entry.payload)
            except ValueError:
                log.error("%s: unreadable inbox entry %s dropped", entry.event_id, entry.entry_id)
                continue
            if isinstance(payload, Probe):
                continue
            if isinstance(payload, StopRequest):
                self.stops.append(payload)
                self.stop_ids.append(entry.entry_id)
                self.stop_arrived.append(entry.received_at)
                continue
            self.items.append(payload)
            self.item_ids.append(entry.entry_id)
            self.arrived.append(entry.received_at)

    @property
    def messages(self) -> list[UserMessage]:
        return [item for item in self.items if isinstance(item, UserMessage)]

    @property
    def decisions(self) -> list[DecisionRequest]:
        return [item for item in self.items if isinstance(item, DecisionRequest)]


class Serving:
    def __init__(
        self,
        runtime: ConversationRuntime,
        lease: Lease,
        record: Conversation,
        *,
        recovering: bool = False,
        remind: bool = False,
        unheld: bool = False,
    ) -> None:
        self.rt = runtime
        self.io = runtime.io
        self.store = runtime.store
        self.key = record.key
        self.record = record
        self.version = record.checkpoint_version
        self.initial_lease = lease
        self.keeper: LeaseKeeper | None = None
        self.outcomes: list[Outcome] = []
        self.final_status: Status = Status.IDLE
        self.recovering = recovering  # announce the resumption (once)
        self.by_recovery = recovering  # a recovery sweep's serve
        # Found with no holder (it waited for a slot, or a shutdown gave it up): messages
        # that never started a run are not announced as an interruption.
        self.unheld = unheld
        self.yielded = False  # gave its slot to threads waiting (more arrived meanwhile)
        self.remind = remind
        self.outbox = Outbox(runtime.sink, self.store.clock, self.store.state_ttl)
        self.active = False  # something was committed: the release counts as activity
        self.more = False  # the inbox holds more than one commit may consume
        self.again = False  # this pass set the state aside: look at the inbox once more
        self.stopped = False  # stopped for a graceful shutdown: release as `running`
        self.set_aside: Envelope | None = None  # what failing closed left as the checkpoint
        self.paused = False  # it waits for MCP servers that are down (`paused_for`)
        self.decided: dict[str, DecisionMade] = {}  # carried from envelope to envelope
        self.armed: set[str] = set()  # recorded as started by this serve, not started yet
        self.showing = False  # progress was shown for this thread: end it when done
        self.notes: list[Outcome] = []  # for the thread, with the next commit (`model_input`)
        self.stopped_by = ""  # who stopped a run of this serve (a later stop is told so)
        self.waiting_on: str | None = None  # the person a decision waits on (see below)
        self.read: set[str] = set()  # the inbox entries this serve's passes have read

    def await_decision(self, started_by: str) -> None:
        """The run waits for a decision: released as awaiting approval, listed for the
        person who started it (`Store.list_waiting_on`)."""
        self.final_status = Status.AWAITING_APPROVAL
        self.waiting_on = started_by or None

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
        async with LeaseKeeper(self.store, self.initial_lease, calls=self.rt.io) as keeper:
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

    async def show_work(self, requester: str | None) -> None:
        """Progress: this thread is being worked on."""
        if not self.showing:
            self.showing = True
            await shown(lambda: self.rt.progress.begin(self.key, requester))

    async def end_showing(self) -> None:
        """Progress: done here. Before the lease goes, so that whoever takes the thread
        next starts showing its own work, not onto this one's."""
        if self.showing:
            self.showing = False
            await shown(lambda: self.rt.progress.end(self.key))

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
                await self.io(
                    self.store.release,
                    self.lease,
                    status=status,
                    inbox_seen=None if self.stopped else self.record.inbox_seq,
                    delivery=self.outbox.mark(),
                    # A delivery still owed keeps the state alive for its retry.
                    touch=(self.active and quiet) or self.outbox.pending,
                    run_by=self.waiting_on if waiting else None,
                )
                return
            except InboxChanged:
                if self.rt.admission.others_waiting and status is Status.IDLE:  # one run each
                    await self._yield_slot()
                    return
                fresh = await self.io(self.store.get, self.key)
                if fresh is None:
                    return
                self.record = fresh

    async def _yield_slot(self) -> None:
        """Messages arrived during the run while other threads wait for a slot: the thread
        goes back in line, given up as `running` with its new messages in the inbox."""
        await self.io(
            self.store.release,
            self.lease,
            status=Status.RUNNING,
            delivery=self.outbox.mark(),
            touch=self.active,
        )
        self.yielded = True

    async def _release_quietly(self) -> None:
        """Cancelled (shutdown past its grace): give the thread up at once, as `running`, so
        that the next process continues it without waiting for the lease to expire."""
        try:
            await asyncio.wait_for(
                self.io(
                    self.store.release,
                    self.lease,
                    status=Status.RUNNING,
                    delivery=self.outbox.mark(),
                    touch=False,
                ),
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
                await self.io(
                    self.store.release,
                    self.lease,
                    status=Status.INTERRUPTED,
                    inbox_seen=record.inbox_seq,
                    touch=False,
                )
                return Status.INTERRUPTED
            except InboxChanged:
                pass  # kept just now: it is owed an answer
        await self.io(self.store.release, self.lease, status=Status.RUNNING, touch=False)
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

    async def _tell_refusals(self, *, idle: bool) -> bool:
        """Messages refused at the backlog cap that no live teller has told (`not_taken`);
        whether a notice was posted."""
        self.record, posted = await not_taken.tell_untold(
            self.rt.sink,
            self.store,
            self.io,
            self.record,
            idle=idle,
            telling=self.rt.not_taken.telling,
        )
        return posted

    # -- one pass -----------------------------------------------------------------------

    async def step(self) -> None:
        self.check()
        self.version = self.record.checkpoint_version
        if self.record.inbox is not None:  # the read that took the thread brought it along
            inbox = self.record.inbox
            self.record = self.record.model_copy(update={"inbox": None})
        else:
            inbox = await self.io(
                self.store.read_inbox, self.key, self.record.generation, CONSUME_LIMIT + 1
            )
        self.more = len(inbox) > CONSUME_LIMIT
        entries = Entries(inbox[:CONSUME_LIMIT])
        self.read.update(entries.ids)
        if self.record.expired_from is not None:  # the thread is told first
            await expiry.announce(self, entries)
            return
        if self.record.refusals_untold:  # a notice its process did not live to post
            await self._tell_refusals(idle=False)
        unlisted = await self.rt.mcp.ready()
        if unlisted:  # the fingerprint is not final: nothing can be verified or committed
            await paused_for(self, unlisted)
            return
        try:
            current = await trust.current_envelope(self)
        except trust.WrittenByNewer as newer:
            self._leave_for_newer(str(newer))
            return
        owed: list[Outcome] = []
        if not self.outbox.loaded(self.version):
            self.outbox.load(self.record, current.outbox if current else [])
            owed = [entry.outcome for entry in self.outbox.owed]
        runnable = current if current is not None and current.runnable else None
        if current is not None:
            self.decided = dict(current.decided)
        # A crash is announced; a delivery retried after its backoff just arrives.
        redelivery = self.outbox.pending and self.record.delivery_attempts > 0
        waited = entries.ids and not self.unheld  # kept while a holder had the thread
        if entries.stops:
            self.recovering = False  # a stop comes first: nothing resumes to be announced
        if self.recovering and (runnable or waited or self.outbox.pending) and not redelivery:
            self.recovering = False
            await self.emit_now(
                Notice(
                    key=self.key,
                    kind=NoticeKind.RESUMED_AFTER_RESTART,
                    text="I was interrupted (a restart or a failed delivery); "
                    "resuming where I left off.",
                )
            )
        self.outcomes.extend(owed)
        await self.outbox.deliver()
        if entries.stops and await stopping.stop_requests(self, entries, runnable):
            return
        if runnable is not None and runnable.humans:
            await approvals.while_awaiting(self, runnable, entries)
            return
        if entries.decisions:
            known = current or await self._finished_envelope()
            for decision in entries.decisions:
                await self.refuse(decision, approvals.late_decision(known, decision))
        arrived = [HeldMessage.of(m) for m in entries.messages]
        if runnable is not None:  # a run to continue (after a restart, or `/resume`)
            state = await trust.load_state(self, runnable)
            if state is not None:
                await self.drive(state, runnable.started_by, runnable.held + arrived, entries.ids)
                return
            if self.paused:  # its MCP servers are down: it waits
                return
            current = self.set_aside
        if current is not None and current.finished and current.held:
            # A run finished and messages held meanwhile wait for the next one.
            held = current.held + arrived
            await self.drive(await render(self, held), held[0].user, [], entries.ids)
            return
        if arrived:
            await self.drive(await render(self, arrived), arrived[0].user, [], entries.ids)
            return
        if entries.ids:
            await self._consume_only(entries.ids)
        # Nothing ran: a thread set aside (or interrupted) stays so until a message comes.
        set_aside = (Status.NEEDS_RESTART, Status.DISCARDED, Status.INTERRUPTED)
        self.final_status = self.record.status if self.record.status in set_aside else Status.IDLE

    def _leave_for_newer(self, what: str) -> None:
        """A newer version wrote the checkpoint: nothing here reads it, nothing is set aside.
        The thread is given up as `running` with its messages queued, for a replica that can
        read it (its recovery, or the next message it receives)."""
        log.warning(
            "%s: saved by a newer version (%s); left for a replica running it", self.key, what
        )
        metrics.LEFT_FOR_NEWER.inc()
        self.stopped = True

    async def drive(
        self,
        start: str | list[TResponseInputItem] | RunState[Any],
        started_by: str,
        held: list[HeldMessage],
        consume: list[str],
    ) -> None:
        await drive(self, start, started_by, held, consume)

    async def _finished_envelope(self) -> Envelope | None:
        """A finished checkpoint's envelope, read only to say who decided what."""
        if self.record.checkpoint is None:
            return None
        try:
            document = await self.io(self.store.load_checkpoint, self.record.checkpoint)
            return Envelope.model_validate(document)
        except (CheckpointError, ValueError):
            return None

    # -- writing ------------------------------------------------------------------------

    async def commit(
        self,
        envelope: Envelope,
        *,
        consume: list[str],
        outcomes: list[Outcome],
        items: list[str] | None = None,
        base_seq: int | None = None,
        status: Status = Status.RUNNING,
        arm: list[AwaitingCall] | None = None,
        clear_expiry: bool = False,
        clear_stop: bool = False,
    ) -> int | None:
        """Commit the checkpoint with the turn's session items, consuming inbox entries,
        then deliver its outcomes. The status stays `running` until the release that
        records their delivery, so a crash in between is found by `recover`. Calls in `arm`
        (approved by this checkpoint, about to run) are recorded as started in the same
        write. Returns the session's next sequence number."""
        self.check()
        outcomes, self.notes = [*self.notes, *outcomes], []
        envelope.outbox = self.outbox.for_commit(self.version + 1, outcomes, self.record.generation)
        now = self.store.clock()
        armed = [
            ToolCallRecord(
                key=self.key,
                call_id=call.call_id,
                tool_name=call.tool_name,
                arguments=call.arguments,
                status=ToolCallStatus.STARTED,
                fence=self.lease.fence,
                started_at=now,
            )
            for call in arm or []
        ]
        done = await self.io(
            self.store.commit,
            self.lease,
            state=envelope.document(),
            meta=self.rt.meta(finished=envelope.finished and not envelope.held),
            expected_version=self.version,
            items=items or (),
            base_seq=base_seq,
            status=status,
            consume=consume,
            arm=armed,
            run_by=envelope.started_by or None,
            clear_expiry=clear_expiry,
            clear_stop=clear_stop,
        )
        assert done.checkpoint is not None
        self.armed |= set(done.armed)
        self.outbox.committed()
        self.version = done.checkpoint.version
        update: dict[str, Any] = {"checkpoint": done.checkpoint, "status": status}
        if done.next_seq is not None:  # a later pass of this serve builds on these items
            update["next_seq"] = done.next_seq
        if clear_expiry:
            update["expired_from"] = None
        if envelope.started_by:
            update["run_by"] = envelope.started_by
        self.record = self.record.model_copy(update=update)
        self.active = True
        self.outcomes.extend(outcomes)
        await self.outbox.deliver()
        return done.next_seq

    async def _consume_only(self, consume: list[str]) -> None:
        await self.io(
            self.store.apply,
            Commit(key=self.key, lease=self.lease, consume=consume, checkpoint=KEEP),
        )
        self.active = True

    # -- answering one request ----------------------------------------------------------

    async def emit_now(self, outcome: Outcome) -> None:
        """An outcome that answers a request rather than the thread: not recorded."""
        self.outcomes.append(outcome)
        await self.outbox.emit_now(outcome)

    async def refuse(self, decision: DecisionRequest, text: str) -> None:
        await self.emit_now(
            Refused(key=self.key, text=text, reply_to=decision.reply_to, user=decision.user)
        )
