"""A new conversation is noted among its opener's recent ones (the Home tab lists them): by
the release of the serve that answers it, or, when no release of that serve can carry the
note (the thread waits for a slot), by a write of its own."""

from __future__ import annotations

import asyncio
from typing import Any

from agents.testing import ModelStep, ScriptedModel, assistant_message

from bot.runtime import Answer, ConversationRuntime
from bot.settings import RuntimeSettings
from storage import ConversationKey, PersonKey, Store
from testkit.runtime import SideEffects, build_agent

ALICE = "UALICE"


def key(n: int) -> ConversationKey:
    return ConversationKey(team="T1", channel="C1", thread_ts=f"1700000000.{n:06d}")


def slow_answers(
    count: int, gate: asyncio.Event, started: asyncio.Event | None = None
) -> ScriptedModel:
    async def answer(call: Any) -> Any:
        if started is not None:
            started.set()
        await gate.wait()
        return [assistant_message("Done.")]

    return ScriptedModel([ModelStep.respond(answer) for _ in range(count)])


async def first_noted(store: Store, person: PersonKey) -> list[ConversationKey]:
    """The person's recent conversations once there are any (within 10 s)."""
    for _ in range(200):
        noted = store.get_person(person)
        if noted is not None and noted.recent:
            return noted.recent
        await asyncio.sleep(0.05)
    return []


async def test_served_and_queued_conversations_are_both_noted(
    store: Store, effects: SideEffects
) -> None:
    gate, started = asyncio.Event(), asyncio.Event()
    rt = ConversationRuntime(
        store, build_agent(slow_answers(2, gate, started), effects), RuntimeSettings(max_runs=1)
    )
    person = PersonKey(team="T1", user=ALICE)
    serves = []
    for n in (1, 2):
        await rt.intake.keep_message(key(n), event_id=f"Ev{n}", user=ALICE, text="hi", take=True)
        serves.append(asyncio.create_task(rt.serve(key(n), opened_by=person)))
        await asyncio.wait_for(started.wait(), 10)  # the first holds the only slot
    # The second waits for the only slot: noted by a write of its own, while the first's
    # run (not released: the model waits) has noted nothing yet.
    assert await first_noted(store, person) == [key(2)]
    gate.set()
    outcomes = await asyncio.wait_for(asyncio.gather(*serves), 30)
    assert [o for found in outcomes for o in found if isinstance(o, Answer)]
    # The first one's release noted it when it let go; the second was first already.
    noted = store.get_person(person)
    assert noted is not None and set(noted.recent) == {key(1), key(2)}
