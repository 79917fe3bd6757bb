"""Admission's order and fairness, and the replica's 429 gate, without processes."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from bot.runtime.rate_gate import RateGate
from bot.runtime.slots import Slot, Slots
from storage import ConversationKey


def key(n: int) -> ConversationKey:
    return ConversationKey(team="T1", channel="C1", thread_ts=f"{n}.0")


async def test_waiters_are_admitted_in_arrival_order_one_person_at_most_half() -> None:
    admission = Slots(2)
    first = admission.try_take("UANA")
    assert first is not None and admission.try_take("UANA") is not None
    assert admission.try_take("UBEN") is None  # both slots taken
    order: list[str] = []

    async def wait(n: int, person: str) -> Slot | None:
        slot = await admission.take(key(n), person)
        order.append(f"{n}:{person}")
        return slot

    # Ana sends two more before Ben and Cat send theirs.
    tasks = [
        asyncio.create_task(wait(n, person))
        for n, person in [(1, "UANA"), (2, "UANA"), (3, "UBEN"), (4, "UCAT")]
    ]
    await asyncio.sleep(0)
    assert admission.waits(key(1)) and await admission.take(key(1), "UANA") is None
    first.release()  # Ana still holds one slot of two: her next waits behind Ben
    await asyncio.sleep(0)
    assert order == ["3:UBEN"]
    slots = [t.result() for t in tasks if t.done()]
    for slot in slots:
        assert slot is not None
        slot.release()
    await asyncio.sleep(0)
    assert order == ["3:UBEN", "4:UCAT"]
    admission.close()  # shutting down: the rest wait in storage
    results = await asyncio.gather(*tasks)
    assert results[0] is None and results[1] is None
    assert admission.in_use == 2 and admission.peak == 2  # Ana's second, and Cat


async def test_only_one_person_waiting_takes_every_slot() -> None:
    admission = Slots(4)
    slots = [await admission.take(key(n), "UANA") for n in range(4)]
    assert all(slots) and admission.in_use == 4


async def test_a_429_holds_every_run_of_the_replica_once() -> None:
    gate = RateGate()
    context = SimpleNamespace(
        normalized=SimpleNamespace(status_code=429, retry_after=0.3), provider_advice=None
    )
    assert gate.observe(cast(Any, context)) is False  # decides nothing itself
    assert 0.2 < gate.blocked_for() <= 0.3
    other = SimpleNamespace(
        normalized=SimpleNamespace(status_code=500, retry_after=None), provider_advice=None
    )
    gate.observe(cast(Any, other))
    assert gate.closed_times == 1
    await asyncio.gather(gate.wait(), gate.wait(), gate.wait())
    assert gate.waited == 3 and gate.blocked_for() == 0
