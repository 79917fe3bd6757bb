"""Serving one thread while holding its lease: passes until nothing is left to do, then the
release. A serve is the one writer of its thread's working state: what the parts of a pass
decide (approvals, expiry, stops, state checks, the run) they return as values
(`pass_results`), which it applies here (`apply`).

Each pass reads the inbox (messages and decisions, in arrival order) and the checkpoint,
delivers what the thread is still owed, then either applies decisions to a paused run,
continues a run, or starts one. The release records what the thread is left as and is
conditioned on the inbox (`InboxChanged` sends the serve round again), with the delivery
cursor, and as `running` when work is left (a failed delivery, a graceful shutdown) so that
recovery picks the thread up. A fault or a cancellation gives the thread up at once, as
`interrupted` or `running`, so that nothing kept is passed over."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, assert_never

from agents import RunState, TResponseInputItem

from bot import metrics
from bot.runtime import (
    applying_stops,
    approvals,
    backlog_refusals,
    expiry,
    state_checks,
    summaries,
)
from bot.runtime.armed_calls import ArmedCalls, ArmedInTurn
from bot.runtime.delivery import Outbox
from bot.runtime.driver import drive
from bot.runtime.envelope import (
    AwaitingCall,
    DecisionMade,
    DecisionRequest,
    Entries,
    Envelope,
    HeldMessage,
    RunWindow,
    UserMessage,
    parse_payload,
)
from bot.runtime.mcp_servers import paused_for
from bot.runtime.model_input import render
from bot.runtime.model_window import OpenWindow
from bot.runtime.outcomes import (
    ApprovalRequest,
    AwaitingDecision,
    Notice,
    NoticeKind,
    Outcome,
    Refused,
    new_reference,
)
from bot.runtime.pass_results import (
    AwaitsDecision,
    Decisions,
    FailedClosed,
    GivenBack,
    LeftAs,
    PassResult,
    Paused,
    Resume,
    Settled,
    Stopped,
    StopsAnswered,
)
from bot.runtime.progress import shown
from bot.runtime.runtime_parts import RuntimeParts
from bot.runtime.serving_view import Start
from storage import (
    CONSUME_LIMIT,
    KEEP,
    CheckpointError,
    Commit,
    Conversation,
    ConversationSession,
    InboxChanged,
    InboxEntry,
    Lease,
    LeaseKeeper,
    LeaseLost,
    PersonKey,
    Status,
    StorageUnavailable,
    Summary,
    ToolCallRecord,
    ToolCallStatus,
)

log = logging.getLogger(__name__)  # testkit listens to the serve's lines
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


class Serving:
    def __init__(
        self,
        parts: RuntimeParts,
        lease: Lease,
        record: Conversation,
        *,
        recovering: bool = False,
        remind: bool = False,
        unheld: bool = False,
        opened_by: PersonKey | None = None,
    ) -> None:
        self.parts = parts
        self.store = parts.store
        self.storage_calls = parts.storage_calls
        self.key = record.key
        self.record = record
        self.initial_lease = lease
        self.keeper: LeaseKeeper | None = None
        self.outbox = Outbox(parts.on_outcome, parts.store.clock, parts.store.state_ttl)
        self.slots = parts.slots  # others waiting for a slot: a thread yields its own
        self.outcomes: list[Outcome] = []
        self.final_status: Status = Status.IDLE  # what the release leaves the thread as
        self.by_recovery = recovering  # a recovery sweep's serve
        self.yielded = False  # gave its slot to threads waiting (more arrived meanwhile)
        self.active = False  # something was committed: the release counts as activity
        self.backlog_left = False  # the inbox holds more than one commit may consume
        self.reread = False  # this pass set the state aside: look at the inbox once more
        self.stopped = False  # stopped for a graceful shutdown: release as `running`
        self.waiting_on: str | None = None  # the person a decision waits on (see below)
        self.read: set[str] = set()  # the inbox entries this serve's passes have read
        # Who opened the conversation, to be noted by the release (`Store.release(note=)`).
        self.opened_by = opened_by
        self.version = record.checkpoint_version
        self.recovering = recovering  # announce the resumption (once)
        # Found with no holder (it waited for a slot, or a shutdown gave it up): messages
        # that never started a run are not announced as an interruption.
        self.unheld = unheld
        self.remind = remind
        self.closed_to: Envelope | None = None  # what failing closed left as the checkpoint
        self.paused = False  # it waits for MCP servers that are down (`paused_for`)
        self.decided: dict[str, DecisionMade] = {}  # carried from envelope to envelope
        self.armed = ArmedCalls()  # approved by this serve's commits, not started yet
        self.showing = False  # progress was shown for this thread: end it when done
        self.notes: list[Outcome] = []  # for the thread, with the next commit (`model_input`)
        self.stopped_by = ""  # who stopped a run of this serve (a later stop is told so)
        self.pending_summary: Summary | None = None  # stored by the next commit

    @property
    def armed_in_turn(self) -> ArmedInTurn:
        """The armed calls as a turn's guarded tools move them (claimed, started, settled)."""
        return self.armed

    # -- what is shown while it runs --------------------------------------------------------------

    async def show_work(self, requester: str | None) -> None:
        """Progress: this thread is being worked on."""
        if not self.showing:
            self.showing = True
            await shown(lambda: self.parts.progress.begin(self.key, requester))

    async def end_showing(self) -> None:
        """Progress: done here. Before the lease goes, so that whoever takes the thread
        next starts showing its own work, not onto this one's."""
        if self.showing:
            self.showing = False
            await shown(lambda: self.parts.progress.end(self.key))

    async def _tell_refusals(self, *, idle: bool) -> bool:
        """Messages refused at the backlog cap that no live teller has told (`backlog_refusals`);
        whether a notice was posted."""
        self.record, posted = await backlog_refusals.tell_untold(
            self.parts.on_outcome,
            self.store,
            self.storage_calls,
            self.record,
            idle=idle,
            telling=self.parts.refusals.telling,
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
            inbox = await self.storage_calls(
                self.store.read_inbox, self.key, self.record.generation, CONSUME_LIMIT + 1
            )
        self.backlog_left = len(inbox) > CONSUME_LIMIT
        entries = Entries(inbox[:CONSUME_LIMIT])
        self.read.update(entries.ids)
        if self.record.expired_from is not None:  # the thread is told first
            await self.apply(await expiry.announce(self, entries))
            return
        if self.record.refusals_untold:  # a notice its process did not live to post
            await self._tell_refusals(idle=False)
        unlisted = await self.parts.mcp.ready()
        if unlisted:  # the fingerprint is not final: nothing can be verified or committed
            await self.apply(await paused_for(self, unlisted))
            return
        try:
            checked = await state_checks.current_envelope(self)
        except state_checks.WrittenByNewer as newer:
            self._leave_for_newer(str(newer))
            return
        if isinstance(checked, FailedClosed):
            await self.apply(checked)
        current = checked.finished if isinstance(checked, FailedClosed) else checked
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
        if entries.stops:
            stop = await applying_stops.stop_requests(self, entries, runnable)
            await self.apply(stop)
            if isinstance(stop, Stopped):
                return
        if runnable is not None and runnable.humans:
            await self.apply(*await approvals.while_awaiting(self, runnable, entries))
            return
        if entries.decisions:
            known = current or await self.saved_envelope()
            for decision in entries.decisions:
                await self.refuse(decision, approvals.late_decision(known, decision))
        arrived = [HeldMessage.of(m) for m in entries.messages]
        if runnable is not None:  # a run to continue (after a restart, or `/resume`)
            state = await state_checks.load_state(self, runnable)
            if isinstance(state, RunState):
                held = runnable.held + arrived
                await self.drive(state, runnable.started_by, held, entries.ids, runnable.window)
                return
            await self.apply(state)
            if self.paused:  # its MCP servers are down: it waits
                return
            current = self.closed_to
        if current is not None and current.finished and current.held:
            # A run finished and messages held meanwhile wait for the next one.
            held = current.held + arrived
            await self.drive(await self.input_for(held), held[0].user, [], entries.ids)
            return
        if arrived:
            await self.drive(await self.input_for(arrived), arrived[0].user, [], entries.ids)
            return
        if entries.ids:
            await self._consume_only(entries.ids)
        # Nothing ran: a thread set aside (or interrupted) stays so until a message comes.
        set_aside = (Status.SET_ASIDE, Status.DISCARDED, Status.INTERRUPTED)
        self.release_as(self.record.status if self.record.status in set_aside else Status.IDLE)

    def _leave_for_newer(self, what: str) -> None:
        """A newer version wrote the checkpoint: nothing here reads it, nothing is set aside.
        The thread is given up as `running` with its messages queued, for a replica that can
        read it (its recovery, or the next message it receives)."""
        log.warning(
            "%s: saved by a newer version (%s); left for a replica running it", self.key, what
        )
        metrics.LEFT_FOR_NEWER.inc()
        self.give_back()

    async def drive(
        self,
        start: Start,
        started_by: str,
        held: list[HeldMessage],
        consume: list[str],
        window: RunWindow | None = None,
    ) -> None:
        await self.apply(await drive(self, start, started_by, held, consume, window))

    async def saved_envelope(self) -> Envelope | None:
        """The current checkpoint's envelope as it was saved, read only to tell what it held
        (who decided what, the messages it held); None when there is none, or it cannot be
        read."""
        if self.record.checkpoint is None:
            return None
        try:
            document = await self.storage_calls(self.store.load_checkpoint, self.record.checkpoint)
            return Envelope.model_validate(document)
        except (CheckpointError, ValueError):
            return None

    # -- writing ------------------------------------------------------------------------

    async def begin_run(self, started_by: str) -> None:
        """A run of `started_by`'s begins: the record names them its starter (`run_by`,
        against whom a stop is authorised) before anything is shown or run, in a fenced
        write of its own when it names someone else (a keep never does: the author of a
        reply kept while a run waits did not start that run)."""
        if not started_by or self.record.run_by == started_by:
            return
        await self.storage_calls(
            self.store.apply,
            Commit(key=self.key, lease=self.lease, run_by=started_by, touch=False),
        )
        self.record = self.record.model_copy(update={"run_by": started_by})

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
        (approved by this checkpoint, to run next) are recorded as approved in the same
        write; each is recorded as started just before it runs (`guard`), so a crash
        before then leaves it approved, to be run after the restart. Returns the session's
        next sequence number."""
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
                status=ToolCallStatus.APPROVED,
                fence=self.lease.fence,
                started_at=now,
            )
            for call in arm or []
        ]
        done = await self.storage_calls(
            self.store.commit,
            self.lease,
            state=envelope.document(),
            meta=self.parts.meta(finished=envelope.finished and not envelope.held),
            expected_version=self.version,
            items=items or (),
            base_seq=base_seq,
            status=status,
            consume=consume,
            arm=armed,
            run_by=envelope.started_by or None,
            clear_expiry=clear_expiry,
            clear_stop=clear_stop,
            summary=self.pending_summary,
        )
        assert done.checkpoint is not None
        if self.pending_summary is not None:
            update_summary = {"summary_seq": self.pending_summary.through}
            self.pending_summary = None
        else:
            update_summary = {}
        self.armed.armed_by_commit(done.armed)
        self.outbox.committed()
        self.version = done.checkpoint.version
        update: dict[str, Any] = {"checkpoint": done.checkpoint, "status": status, **update_summary}
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

    async def set_aside_state(
        self,
        finished: Envelope,
        *,
        notice: Notice,
        items: list[str],
        consume: list[str],
        release_as: Status,
        status: Status = Status.RUNNING,
        clear_stop: bool = False,
        orphan_ok: bool = False,
    ) -> None:
        """Replace the checkpoint by `finished` (nothing of the old one runs again), with
        `notice` and the outputs (`items`) that close the history's open calls, then delete
        the old one's blob. With `orphan_ok`, a blob that cannot be deleted is left for the
        bucket's lifecycle rule; else the failure stops the serve like any storage fault."""
        old = self.record.checkpoint
        await self.commit(
            finished,
            consume=consume,
            outcomes=[notice],
            items=items,
            status=status,
            clear_stop=clear_stop,
        )
        if old is not None and old.inline is None:  # an inline state has no blob
            try:
                await self.storage_calls(self.store.delete_checkpoint, old)
            except Exception:
                if not orphan_ok:
                    raise
                log.warning("%s: could not delete %s", self.key, old.object_key, exc_info=True)
        self.release_as(release_as)

    async def input_for(self, messages: list[HeldMessage]) -> list[TResponseInputItem]:
        """The model's input for the messages that start a run; its notes for the thread go
        out with the run's next commit."""
        given = await render(self.parts, self.key, self.record.next_seq, messages)
        self.notes += given.notes
        return given.items

    async def open_window(
        self, session: ConversationSession, given: list[Any], started_by: str
    ) -> OpenWindow:
        """What a fresh run is given of the history (`summaries.open_window`); a summary
        made for it is stored by this serve's next checkpoint commit."""
        opened = await summaries.open_window(self, session, given, started_by)
        if opened.made is not None:
            self.pending_summary = opened.made
        return opened

    async def _consume_only(self, consume: list[str]) -> None:
        await self.storage_calls(
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

    # -- what the release records ------------------------------------------------------

    def release_as(self, status: Status) -> None:
        """When nothing is left to do, the thread is released as `status`."""
        self.final_status = status

    async def apply(self, *results: PassResult) -> None:
        """What the parts of the pass decided (`pass_results`), applied to this serve in
        order."""
        for result in results:
            await self._apply(result)

    async def _apply(self, result: PassResult) -> None:
        match result:
            case Settled():
                self.release_as(result.status)
                self.look_again(result.reread)
                self.armed.disarm(result.disarmed)
            case Paused():
                self.release_as(Status.INTERRUPTED)
                self.paused = True
                self.backlog_left = False
            case FailedClosed():
                self.closed_to = result.finished
                self.look_again()
            case Stopped():
                self.stop_applied()
                self.decided = result.decided
                self.stopped_by = result.by
                self.armed.disarm(result.disarmed)
                if result.reread:
                    self.look_again()
            case StopsAnswered():
                self.stop_applied()
            case Decisions():
                self.decided = result.decided
            case AwaitsDecision():  # listed for its starter (`Store.list_waiting_on`)
                self.release_as(Status.AWAITING_APPROVAL)
                self.waiting_on = result.started_by or None
                if result.reminded:
                    self.remind = False
            case Resume():
                self.decided = result.decided
                await self.drive(result.state, result.started_by, result.held, [], result.window)
            case LeftAs():
                self.release_as(result.status)
            case GivenBack():
                self.give_back()
            case _:
                assert_never(result)

    def stop_applied(self) -> None:
        """The stop's request was cleared in the store (the commit that returned the result
        did it): the keeper's watch no longer asks this serve's next run to stop. Told as
        the result is applied, with no await since that commit, just as early as the part
        that made the commit could have told it."""
        if self.keeper is not None:
            self.keeper.stop_applied()

    def look_again(self, when: bool = True) -> None:
        """Whether the serve reads the inbox once more after this pass."""
        self.reread = when

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
        async with LeaseKeeper(self.store, self.initial_lease, calls=self.storage_calls) as keeper:
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
            if (self.backlog_left or self.reread) and not self.stopped:
                self.reread = False
                continue
            await self.outbox.deliver()
            await self.end_showing()
            quiet = True  # a wait that posted nothing is no activity
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
                if self.slots.others_waiting and status is Status.IDLE:  # one run each
                    await self._yield_slot()
                    return
                fresh = await self.storage_calls(self.store.get, self.key)
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
        await self.storage_calls(self.store.release, self.lease, note=self.opened_by, **how)
        self.opened_by = None

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
            record = await self.storage_calls(self.store.get, self.key)
            if record is not None:
                generation, limit = record.generation, CONSUME_LIMIT + 1
                inbox = await self.storage_calls(self.store.read_inbox, self.key, generation, limit)
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
