"""Serving a kept thread when a slot admits it (`admission`), and continuing threads that
waited for their MCP servers. A thread that finds every slot taken waits without its
lease; one that yields its slot goes back in line. Mixed into `ConversationRuntime`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import abstractmethod
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from bot import metrics
from bot.runtime.admission import Admission
from bot.runtime.keeping import Keeping
from bot.runtime.lease_owner import new_owner
from bot.runtime.outcomes import Notice, NoticeKind, Outcome
from bot.runtime.people import People
from bot.runtime.progress import Progress, shown
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

log = logging.getLogger("bot.runtime.runtime")  # these were the runtime's own lines
CONTINUE_WAIT_STEPS = 300  # tenths of a second


@dataclass(frozen=True)
class Served:
    outcomes: list[Outcome]
    yielded: bool  # it gave its slot to others waiting: back in line


class Admitting(Keeping, People):
    """Mixed into `ConversationRuntime`, which owns these:"""

    admission: Admission
    progress: Progress

    @abstractmethod
    async def serve_under_lease(
        self,
        lease: Lease,
        record: Conversation,
        *,
        remind: bool = False,
        recovering: bool = False,
        unheld: bool = False,
        note: PersonKey | None = None,
    ) -> Served:
        """Serve the thread under its lease, until nothing is left to do (`serving`); its
        release notes the conversation for `note` (`Store.release`)."""

    @abstractmethod
    def _serves(self, key: ConversationKey) -> bool:
        """This process serves the thread now."""

    @abstractmethod
    def _in_background(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run `work` in a task that `drain` waits for."""

    @abstractmethod
    def _emit_later(self, outcomes: Sequence[Outcome]) -> None:
        """Deliver outcomes after the request that caused them is acknowledged."""

    @abstractmethod
    async def emit(self, outcomes: Sequence[Outcome]) -> None:
        """Deliver outcomes that are not recorded anywhere (best effort)."""

    async def serve(self, key: ConversationKey, *, note: PersonKey | None = None) -> list[Outcome]:
        """Serve the thread if it is free (or taken for us when its message was kept); if
        another holder has it, that holder reads the inbox before it lets go (and a dead
        holder's thread is picked up by `recover`). `note`: the person who opened the
        conversation, noted by the serve's release (else by a write of its own)."""
        await self.keeps.settled()  # the burst's other messages are acknowledged first
        taken = self._taken.pop(key, None)
        person = self._requesters.pop(key, None)
        if self.draining:
            if taken is not None:  # give it up at once: the next process serves it
                await self.io(
                    self.store.release, taken[0], status=Status.RUNNING, touch=False, note=note
                )
            else:
                await self._noted_alone(note, key)
            return []  # kept already; the next process serves it
        slot = self.admission.try_take(person)
        if slot is None:  # every slot is taken: the thread waits, without its lease
            metrics.QUEUED.inc()
            if taken is not None:
                await self._give_up(taken[0], note)
            else:
                await self._noted_alone(note, key)
            return await self.serve_when_admitted(key, person)
        with slot:
            if taken is not None and taken[0].expires_at > self.store.clock():
                lease, record = taken
            else:
                try:
                    lease, record = await self.io(
                        self.store.acquire, key, new_owner(self.process), create=False
                    )
                except LeaseBusy:
                    await self._noted_alone(note, key)
                    text = "Queued: I'll answer next."
                    return [Notice(key=key, kind=NoticeKind.QUEUED, text=text)]
                except NotFound:
                    return []
            served = await self.serve_under_lease(lease, record, note=note)
        outcomes = served.outcomes
        if served.yielded:
            outcomes += await self.serve_when_admitted(key, person)
        return outcomes

    async def _noted_alone(self, note: PersonKey | None, key: ConversationKey) -> None:
        """No release of this serve can carry the note: a write of its own."""
        if note is not None:
            await self.note_conversation(note, key)

    async def _give_up(self, lease: Lease, note: PersonKey | None = None) -> None:
        """Release a thread taken by its keep, as `running` with its inbox untouched: it
        waits durably, found by any replica's recovery (see `admission`)."""
        with contextlib.suppress(LeaseLost):  # another replica took it meanwhile
            await self.io(self.store.release, lease, status=Status.RUNNING, touch=False, note=note)

    async def serve_when_admitted(self, key: ConversationKey, person: str | None) -> list[Outcome]:
        """Wait for a slot (the thread says it is queued meanwhile), then serve the thread
        if it still has work and nobody else took it; again while it yields its slot."""
        outcomes: list[Outcome] = []
        while True:
            if not self.admission.waits(key):
                await shown(lambda: self.progress.queued(key, person))
            slot = await self.admission.take(key, person)
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
        if self.draining:
            return None
        try:
            lease, record = await self.io(
                self.store.acquire, key, new_owner(self.process), create=False
            )
        except (LeaseBusy, NotFound):
            return None  # another replica with room serves it (or it is gone)
        if record.status is not Status.RUNNING:  # served meanwhile by another replica
            await self.io(self.store.release, lease, touch=False)
            return None
        return lease, record

    def _continue_waiting(self, keys: Sequence[ConversationKey]) -> None:
        """MCP servers that paused these threads are back: continue each one that is still
        interrupted (in the background, like a recovery)."""
        if self.draining:
            return
        for key in keys:
            self._in_background(self._continue(key))

    async def _continue(self, key: ConversationKey) -> None:
        for _ in range(CONTINUE_WAIT_STEPS):  # the serve that paused it lets go first
            if not self._serves(key):
                break
            await asyncio.sleep(0.1)
        try:
            lease, record = await self.io(
                self.store.acquire, key, new_owner(self.process), create=False
            )
        except (LeaseBusy, NotFound):
            return  # someone serves it (and continues it), or it is gone
        except Exception:
            log.warning("%s: could not continue it after its MCP servers came back", key)
            return
        if record.status is not Status.INTERRUPTED or self.draining:
            await self.io(self.store.release, lease, touch=False)
            return
        log.info("%s: its MCP servers are back; continuing", key)
        try:
            await self.serve_under_lease(lease, record)
        except Exception:
            log.exception("%s: continuing after the MCP servers came back failed", key)
