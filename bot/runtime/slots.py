"""Run slots: at most `BOT_MAX_RUNS` threads are served at once in a replica.

Keeping a message never waits for this (the keep and the ack come first, see `acks_first`).
A thread that finds no slot gives its lease up at once, as `running` with its inbox
untouched, so it waits durably: any replica's recovery sweep finds it, one with room takes
it, and a replica that dies while threads wait loses none. Here it waits in arrival order
(one entry per thread: a key, a person and a future, so a thousand waiting threads stay
small); a slot that frees goes to the first waiter whose person holds fewer than
`per_person` slots, so that one person cannot take every slot while others wait (when only
that person waits, they get it). A thread's later messages are folded into its one serve;
and a serve that would go round again for messages that arrived meanwhile yields its slot
when others wait (`Serving`), so no thread delays another's first answer by more than one
run."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field

from storage import ConversationKey


@dataclass
class _Waiter:
    person: str | None
    granted: asyncio.Future[Slot | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Slot:
    """One run's place; `release` (or leaving `with`) gives it to the next waiter."""

    def __init__(self, slots: Slots, person: str | None) -> None:
        self.slots = slots
        self.person = person
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.slots._freed(self.person)

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


class Slots:
    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.per_person = max(1, slots // 2)
        self.in_use = 0
        self.peak = 0  # most slots in use at once (benchmarks print it)
        self.by_person: dict[str | None, int] = {}
        self.waiting: OrderedDict[ConversationKey, _Waiter] = OrderedDict()
        self.closed = False

    @property
    def room(self) -> bool:
        """A slot is free and nobody waits."""
        return not self.closed and not self.waiting and self.in_use < self.slots

    def try_take(self, person: str | None) -> Slot | None:
        """A slot now, when one is free and nobody waits (no jumping the queue)."""
        return self._grant(person) if self.room else None

    def waits(self, key: ConversationKey) -> bool:
        return key in self.waiting

    @property
    def others_waiting(self) -> bool:
        return bool(self.waiting)

    async def take(self, key: ConversationKey, person: str | None) -> Slot | None:
        """Wait for a slot, in arrival order. None when the thread already waits here (that
        waiter serves it) or the replica is shutting down (the thread waits in storage)."""
        if self.closed or key in self.waiting:
            return None
        waiter = self.waiting[key] = _Waiter(person)
        self._admit()
        try:
            return await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                slot = waiter.granted.result()
                if slot is not None:
                    slot.release()
            raise
        finally:
            if self.waiting.get(key) is waiter:
                del self.waiting[key]

    def close(self) -> None:
        """Shutting down: nothing more is admitted; waiters go (their threads wait in
        storage for the next process, or another replica)."""
        self.closed = True
        for waiter in self.waiting.values():
            if not waiter.granted.done():
                waiter.granted.set_result(None)
        self.waiting.clear()

    def _grant(self, person: str | None) -> Slot:
        self.in_use += 1
        self.peak = max(self.peak, self.in_use)
        self.by_person[person] = self.by_person.get(person, 0) + 1
        return Slot(self, person)

    def _freed(self, person: str | None) -> None:
        self.in_use -= 1
        left = self.by_person.get(person, 1) - 1
        if left:
            self.by_person[person] = left
        else:
            self.by_person.pop(person, None)
        self._admit()

    def _admit(self) -> None:
        while not self.closed and self.in_use < self.slots and self.waiting:
            key = self._next()
            waiter = self.waiting.pop(key)
            if waiter.granted.done():  # cancelled meanwhile
                continue
            waiter.granted.set_result(self._grant(waiter.person))

    def _next(self) -> ConversationKey:
        """The first waiter whose person is under `per_person`; else the first."""
        for key, waiter in self.waiting.items():
            if waiter.person is None or self.by_person.get(waiter.person, 0) < self.per_person:
                return key
        return next(iter(self.waiting))
