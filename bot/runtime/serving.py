"""Serving one thread while holding its lease: until nothing is left to do.

Each pass reads the inbox (messages and decisions, in arrival order) and the checkpoint,
delivers what the thread is still owed, then either applies decisions to a paused run,
continues a run, or starts one. The lease is released only when the inbox has nothing new
(`InboxChanged` sends us round again), with the delivery cursor, and as `running` when work
is left (a failed delivery, a graceful shutdown) so that recovery picks the thread up.
Holding the lease, the release and giving up after a fault are in `holding`; the inbox's
entries, parsed, in `inbox_entries`; setting a state aside (a stop, a discard, failing
closed) is `Serving.set_aside_state`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from bot import metrics
from bot.runtime import approvals, expiry, not_taken, state_checks, stopping
from bot.runtime.delivery import Outbox
from bot.runtime.driver import drive
from bot.runtime.envelope import (
    AwaitingCall,
    DecisionMade,
    DecisionRequest,
    Envelope,
    HeldMessage,
    RunWindow,
)
from bot.runtime.holding import Holding
from bot.runtime.inbox_entries import Entries
from bot.runtime.mcp_servers import paused_for
from bot.runtime.model_input import render
from bot.runtime.outcomes import Notice, NoticeKind, Outcome, Refused
from bot.runtime.progress import shown
from bot.runtime.runtime_parts import RuntimeParts
from bot.runtime.serving_view import Start
from storage import (
    CONSUME_LIMIT,
    KEEP,
    CheckpointError,
    Commit,
    Conversation,
    Lease,
    PersonKey,
    Status,
    Summary,
    ToolCallRecord,
    ToolCallStatus,
)

log = logging.getLogger(__name__)


class Serving(Holding):
    def __init__(
        self,
        runtime: RuntimeParts,
        lease: Lease,
        record: Conversation,
        *,
        recovering: bool = False,
        remind: bool = False,
        unheld: bool = False,
        note: PersonKey | None = None,
    ) -> None:
        super().__init__(
            runtime.store,
            runtime.io,
            lease,
            record,
            outbox=Outbox(runtime.sink, runtime.store.clock, runtime.store.state_ttl),
            admission=runtime.admission,
            by_recovery=recovering,
            note=note,
        )
        self.rt = runtime
        self.version = record.checkpoint_version
        self.recovering = recovering  # announce the resumption (once)
        # Found with no holder (it waited for a slot, or a shutdown gave it up): messages
        # that never started a run are not announced as an interruption.
        self.unheld = unheld
        self.remind = remind
        self.closed_to: Envelope | None = None  # what failing closed left as the checkpoint
        self.paused = False  # it waits for MCP servers that are down (`paused_for`)
        self.decided: dict[str, DecisionMade] = {}  # carried from envelope to envelope
        self.armed: set[str] = set()  # approved by this serve's commits, not started yet
        self.showing = False  # progress was shown for this thread: end it when done
        self.notes: list[Outcome] = []  # for the thread, with the next commit (`model_input`)
        self.stopped_by = ""  # who stopped a run of this serve (a later stop is told so)
        self.pending_summary: Summary | None = None  # stored by the next commit

    # -- what is shown while it runs --------------------------------------------------------------

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
            current = await state_checks.current_envelope(self)
        except state_checks.WrittenByNewer as newer:
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
            state = await state_checks.load_state(self, runnable)
            if state is not None:
                held = runnable.held + arrived
                await self.drive(state, runnable.started_by, held, entries.ids, runnable.window)
                return
            if self.paused:  # its MCP servers are down: it waits
                return
            current = self.closed_to
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
        await drive(self, start, started_by, held, consume, window)

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

    async def begin_run(self, started_by: str) -> None:
        """A run of `started_by`'s begins: the record names them its starter (`run_by`,
        against whom a stop is authorised) before anything is shown or run, in a fenced
        write of its own when it names someone else (a keep never does: the author of a
        reply kept while a run waits did not start that run)."""
        if not started_by or self.record.run_by == started_by:
            return
        await self.io(
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
            summary=self.pending_summary,
        )
        assert done.checkpoint is not None
        if self.pending_summary is not None:
            update_summary = {"summary_seq": self.pending_summary.through}
            self.pending_summary = None
        else:
            update_summary = {}
        self.armed |= set(done.armed)
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
                await self.io(self.store.delete_checkpoint, old)
            except Exception:
                if not orphan_ok:
                    raise
                log.warning("%s: could not delete %s", self.key, old.object_key, exc_info=True)
        self.release_as(release_as)

    def failed_closed(self, finished: Envelope) -> None:
        """The state was set aside as untrustworthy: what arrived with this pass is served
        from `finished`, the fresh state."""
        self.closed_to = finished
        self.look_again()

    def pause_for_servers(self) -> None:
        """It waits, interrupted, for MCP servers that are down: nothing more runs here."""
        self.release_as(Status.INTERRUPTED)
        self.paused = True
        self.more = False

    def note_decisions(self, decided: dict[str, DecisionMade]) -> None:
        """Who decided what, carried to the envelopes this serve writes next."""
        self.decided = decided

    def note_stopped_by(self, who: str | None) -> None:
        self.stopped_by = who or ""

    def add_notes(self, notes: Sequence[Outcome]) -> None:
        """For the thread, with the next commit."""
        self.notes += notes

    def take_reminder(self) -> bool:
        """Whether to remind the thread of what it waits for (once)."""
        remind, self.remind = self.remind, False
        return remind

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
