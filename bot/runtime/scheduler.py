"""When a kept thread is served: at once when a run slot is free (`slots`), else in line
without its lease; `/resume`, a run like any other; threads that waited for their MCP
servers, continued when those are back. A serve that yields its slot goes back in line."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from bot import metrics
from bot.runtime.acks_first import AcksFirst
from bot.runtime.intake import Intake, Kept
from bot.runtime.lease_owner import new_owner
from bot.runtime.outcomes import Notice, NoticeKind, Outcome, StatusReply
from bot.runtime.people import People
from bot.runtime.progress import shown
from bot.runtime.queries import Queries
from bot.runtime.runtime_parts import RuntimeParts
from bot.runtime.serving import Serving
from storage import (
    Conversation,
    ConversationKey,
    Lease,
    LeaseBusy,
    LeaseLost,
    NotFound,
    PersonKey,
    Status,
)

log = logging.getLogger(__name__)
CONTINUE_WAIT_STEPS = 300  # tenths of a second

NEUTRAL = (
    "I can't resume that thread: there is nothing of mine to resume there, or it is not one "
    "you took part in."
)
EXPIRED_RESUME = (
    "There is nothing to resume: this conversation's saved state expired, and nothing that "
    "was waiting was run (see the thread). Send a new message there to start again."
)
# Why a conversation that was found has nothing to resume, by its status.
NOTHING_TO_RESUME = {
    Status.IDLE: "There is nothing to resume: the last run finished.",
    Status.SET_ASIDE: "The saved state was not trustworthy and was set aside; "
    "send a new message to start over.",
    Status.DISCARDED: "An admin discarded this conversation's state; "
    "send a new message to start over.",
}
QUEUED_RESUME = (
    "Queued: I'm busy with other conversations, and will continue it as soon as one is done."
)
ALREADY_QUEUED = "It is queued already: it continues as soon as I'm done with another."
RESTARTING = "I'm restarting, so nothing was resumed; use /resume again in a moment."
RUNNING_NOW = "It is running right now."


@dataclass(frozen=True)
class Served:
    outcomes: list[Outcome]
    yielded: bool  # it gave its slot to others waiting: back in line


class Scheduler:
    def __init__(
        self,
        parts: RuntimeParts,
        intake: Intake,
        queries: Queries,
        people: People,
        acks_first: AcksFirst,
    ) -> None:
        self.parts = parts
        self.store = parts.store
        self.storage_calls = parts.storage_calls
        self.slots = parts.slots
        self.intake = intake
        self.queries = queries
        self.people = people
        self.acks_first = acks_first
        parts.mcp.on_back = self.continue_waiting

    async def serve_under_lease(
        self,
        lease: Lease,
        record: Conversation,
        *,
        remind: bool = False,
        recovering: bool = False,
        unheld: bool = False,
        opened_by: PersonKey | None = None,
    ) -> Served:
        """Serve a thread whose lease this process took, as one of its live threads (a stop
        reaches it, `drain` waits for it), until nothing is left to do (`serving`); its
        release notes the conversation for `opened_by`."""
        serving = Serving(
            self.parts,
            lease,
            record,
            remind=remind,
            recovering=recovering,
            unheld=unheld,
            opened_by=opened_by,
        )
        with self.intake.live(serving):
            outcomes = await serving.run()
        return Served(outcomes, serving.yielded)

    async def serve(
        self, key: ConversationKey, *, opened_by: PersonKey | None = None
    ) -> list[Outcome]:
        """Serve the thread if it is free (or taken for us when its message was kept); if
        another holder has it, that holder reads the inbox before it lets go (and a dead
        holder's thread is picked up by `recover`). `opened_by`: the person who opened the
        conversation, noted by the serve's release (else by a write of its own)."""
        await self.acks_first.settled()  # the burst's other messages are acknowledged first
        taken = self.intake.taken(key)
        person = self.intake.requester(key)
        if self.parts.draining:
            if taken is not None:  # give it up at once: the next process serves it
                await self.storage_calls(
                    self.store.release, taken[0], status=Status.RUNNING, touch=False, note=opened_by
                )
            else:
                await self._noted_alone(opened_by, key)
            return []  # kept already; the next process serves it
        slot = self.slots.try_take(person)
        if slot is None:  # every slot is taken: the thread waits, without its lease
            metrics.QUEUED.inc()
            if taken is not None:
                await self._give_up(taken[0], opened_by)
            else:
                await self._noted_alone(opened_by, key)
            return await self.serve_when_admitted(key, person)
        with slot:
            if taken is not None and taken[0].expires_at > self.store.clock():
                lease, record = taken
            else:
                try:
                    lease, record = await self.storage_calls(
                        self.store.acquire, key, new_owner(self.parts.process), create=False
                    )
                except LeaseBusy:
                    await self._noted_alone(opened_by, key)
                    text = "Queued: I'll answer next."
                    return [Notice(key=key, kind=NoticeKind.QUEUED, text=text)]
                except NotFound:
                    return []
            served = await self.serve_under_lease(lease, record, opened_by=opened_by)
        outcomes = served.outcomes
        if served.yielded:
            outcomes += await self.serve_when_admitted(key, person)
        return outcomes

    def serve_soon(self, key: ConversationKey, *, opened_by: PersonKey | None = None) -> None:
        """`serve` in a task of its own (which `drain` waits for), for a request that is
        acknowledged as soon as its message is kept; a failure is logged."""
        self.parts.in_background(self._serve_logged(key, opened_by))

    async def _serve_logged(self, key: ConversationKey, opened_by: PersonKey | None) -> None:
        try:
            with metrics.LATENCY.labels("message").time():
                await self.serve(key, opened_by=opened_by)  # progress shows in the thread
        except Exception:
            log.exception("%s: serving it failed", key)

    async def _noted_alone(self, opened_by: PersonKey | None, key: ConversationKey) -> None:
        """No release of this serve can note the conversation for them: a write of its own."""
        if opened_by is not None:
            await self.people.note_conversation(opened_by, key)

    async def _give_up(self, lease: Lease, opened_by: PersonKey | None = None) -> None:
        """Release a thread taken by its keep, as `running` with its inbox untouched: it
        waits durably, found by any replica's recovery (see `slots`)."""
        with contextlib.suppress(LeaseLost):  # another replica took it meanwhile
            await self.storage_calls(
                self.store.release, lease, status=Status.RUNNING, touch=False, note=opened_by
            )

    async def serve_when_admitted(self, key: ConversationKey, person: str | None) -> list[Outcome]:
        """Wait for a slot (the thread says it is queued meanwhile), then serve the thread
        if it still has work and nobody else took it; again while it yields its slot."""
        outcomes: list[Outcome] = []
        while True:
            if not self.slots.waits(key):
                await shown(lambda: self.parts.progress.queued(key, person))
            slot = await self.slots.take(key, person)
            if slot is None:  # it waits here already, or the replica is stopping
                return outcomes
            with slot:
                taken = await self._admitted(key)
                if taken is None:
                    return outcomes
                served = await self.serve_under_lease(*taken)
                outcomes += served.outcomes
            if not served.yielded:
                return outcomes

    async def _admitted(self, key: ConversationKey) -> tuple[Lease, Conversation] | None:
        """The thread's lease, when it still waits to be served."""
        if self.parts.draining:
            return None
        try:
            lease, record = await self.storage_calls(
                self.store.acquire, key, new_owner(self.parts.process), create=False
            )
        except (LeaseBusy, NotFound):
            return None  # another replica with room serves it (or it is gone)
        if record.status is not Status.RUNNING:  # served meanwhile by another replica
            await self.storage_calls(self.store.release, lease, touch=False)
            return None
        return lease, record

    # -- /resume ------------------------------------------------------------------------

    async def resume(
        self,
        key: ConversationKey,
        *,
        user: str | None = None,
        reply_to: str | None = None,
        replace: bool = False,
        event_id: str | None = None,
    ) -> list[Outcome]:
        """`/resume`: continue a paused or interrupted conversation, or say why not. Anyone
        who may not act on it gets the same answer whether or not it exists. `reply_to`:
        where to tell the person at once that it is queued (the answer comes at the end,
        after it); with `replace`, that replaces the message the request came from.
        `event_id` names the request (Slack's ids for it; None: one nobody delivers again).
        A resumed run takes a slot before the thread's lease, like any other."""
        found = await self.storage_calls(self.store.get, key)
        if found is None and user is not None and await self.intake.expired_for(key, user):
            probe = event_id or f"probe:resume:{user}:{uuid.uuid4().hex}"
            kept = await self.intake.keep_probe(key, user, "resume", event_id=probe, take=True)
            if kept is Kept.KEPT:
                await self.serve(key)  # the thread is told
            return [StatusReply(key=key, text=EXPIRED_RESUME)]
        if found is None or (user is not None and not self.queries.may_act(found, user)):
            return [StatusReply(key=key, text=NEUTRAL)]
        if found.status in NOTHING_TO_RESUME:  # no slot to wait for: nothing would run
            return [StatusReply(key=key, text=NOTHING_TO_RESUME[found.status])]
        person = user or found.run_by
        slot = None if self.parts.draining else self.slots.try_take(person)
        if slot is None:
            if self.parts.draining:
                return [StatusReply(key=key, text=RESTARTING)]
            if self.slots.waits(key):  # its messages wait already: that waiter serves it
                return [StatusReply(key=key, text=ALREADY_QUEUED)]
            # Told before it waits (the request is acknowledged already): the answer at the
            # end comes after this, never before, when both replace the same message.
            queued = StatusReply(key=key, text=QUEUED_RESUME, reply_to=reply_to, replaces=replace)
            await self.parts.emit([queued])
            slot = await self.slots.take(key, person)
            if slot is None:  # the replica began stopping meanwhile
                return [StatusReply(key=key, text=RESTARTING)]
        with slot:  # the lease only now: nobody waits on a thread this holds
            served = await self._resume_under_slot(key)
        if isinstance(served, StatusReply):
            return [served]
        outcomes = served.outcomes
        if served.yielded:  # messages came meanwhile and others wait: back in line
            outcomes += await self.serve_when_admitted(key, person)
        return outcomes

    async def _resume_under_slot(self, key: ConversationKey) -> Served | StatusReply:
        try:
            lease, record = await self.storage_calls(
                self.store.acquire, key, new_owner(self.parts.process), create=False
            )
        except LeaseBusy:
            return StatusReply(key=key, text=RUNNING_NOW)
        except NotFound:
            return StatusReply(key=key, text=NEUTRAL)
        if record.status in (Status.RUNNING, Status.INTERRUPTED):
            return await self.serve_under_lease(lease, record)
        if record.status is Status.AWAITING_APPROVAL:
            return await self.serve_under_lease(lease, record, remind=True)
        await self.storage_calls(self.store.release, lease, touch=False)
        why = NOTHING_TO_RESUME.get(record.status, "There is nothing to resume.")
        return StatusReply(key=key, text=why)

    # -- threads that waited for their MCP servers ----------------------------------------

    def continue_waiting(self, keys: Sequence[ConversationKey]) -> None:
        """MCP servers that paused these threads are back: continue each one that is still
        interrupted (in the background, like a recovery)."""
        if self.parts.draining:
            return
        for key in keys:
            self.parts.in_background(self._continue(key))

    async def _continue(self, key: ConversationKey) -> None:
        for _ in range(CONTINUE_WAIT_STEPS):  # the serve that paused it lets go first
            if not self.intake.serves(key):
                break
            await asyncio.sleep(0.1)
        try:
            lease, record = await self.storage_calls(
                self.store.acquire, key, new_owner(self.parts.process), create=False
            )
        except (LeaseBusy, NotFound):
            return  # someone serves it (and continues it), or it is gone
        except Exception:
            log.warning("%s: could not continue it after its MCP servers came back", key)
            return
        if record.status is not Status.INTERRUPTED or self.parts.draining:
            await self.storage_calls(self.store.release, lease, touch=False)
            return
        log.info("%s: its MCP servers are back; continuing", key)
        try:
            await self.serve_under_lease(lease, record)
        except Exception:
            log.exception("%s: continuing after the MCP servers came back failed", key)
