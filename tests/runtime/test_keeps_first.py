"""Keeps first: a run does not start while messages that Slack requests wait on are being
kept (at most `patience`), so a burst's acknowledgements are not queued behind its runs."""

from __future__ import annotations

import asyncio
import time

from agents.testing import ScriptedModel, assistant_message

from bot.runtime import Answer, ConversationRuntime
from bot.runtime.keeps_first import KeepsFirst
from storage import Store
from testkit.runtime import KEY, SideEffects, build_agent


async def test_nothing_in_flight_means_no_wait() -> None:
    keeps = KeepsFirst(patience=5)
    start = time.perf_counter()
    await keeps.settled()
    assert time.perf_counter() - start < 0.5


async def test_a_run_waits_for_the_last_keep_in_flight() -> None:
    keeps = KeepsFirst(patience=5)
    waiter = None
    with keeps.keeping():
        with keeps.keeping():
            waiter = asyncio.create_task(keeps.settled())
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.05)
        assert not waiter.done()  # one keep is still in flight
    await asyncio.wait_for(waiter, 1)
    assert keeps.in_flight == 0


async def test_a_run_never_waits_longer_than_its_patience() -> None:
    keeps = KeepsFirst(patience=0.2)
    with keeps.keeping():
        start = time.perf_counter()
        await keeps.settled()
        waited = time.perf_counter() - start
    assert 0.15 < waited < 2


async def test_serving_starts_once_the_keeps_in_flight_are_done(
    store: Store, effects: SideEffects
) -> None:
    rt = ConversationRuntime(
        store, build_agent(ScriptedModel([[assistant_message("Hello!")]]), effects)
    )
    rt.keeps.patience = 30
    await rt.keep_message(KEY, event_id="Ev1", user="U1", text="hi", take=True)
    with rt.keeps.keeping():  # another message of the burst, still being kept
        serving = asyncio.create_task(rt.serve(KEY))
        await asyncio.sleep(0.3)
        assert not serving.done()
        record = store.get(KEY)
        assert record is not None and record.checkpoint is None  # not served yet
    assert await asyncio.wait_for(serving, 30) == [Answer(key=KEY, text="Hello!")]


async def test_a_slack_request_in_flight_holds_new_runs_back(
    store: Store, effects: SideEffects
) -> None:
    """What the HTTP layer wraps every Slack request in (`acknowledging`): from its arrival
    until it is answered, a run waits, so that a burst is acknowledged before its runs."""
    rt = ConversationRuntime(
        store, build_agent(ScriptedModel([[assistant_message("Hello!")]]), effects)
    )
    rt.keeps.patience = 30
    await rt.keep_message(KEY, event_id="Ev1", user="U1", text="hi", take=True)
    with rt.acknowledging():  # a request of the burst, not yet answered
        serving = asyncio.create_task(rt.serve(KEY))
        await asyncio.sleep(0.3)
        assert not serving.done()
    assert await asyncio.wait_for(serving, 30) == [Answer(key=KEY, text="Hello!")]


async def test_a_lone_request_does_not_hold_its_own_run_back() -> None:
    """Its keep inside it is the same request, not a second one on top of it."""
    keeps = KeepsFirst(patience=5, lull=5)
    with keeps.keeping(), keeps.keeping():
        assert keeps.in_flight == 1
    start = time.perf_counter()
    await keeps.settled()
    assert time.perf_counter() - start < 1


async def test_after_overlapping_requests_a_run_waits_for_a_lull() -> None:
    """A burst still arriving has gaps between its requests: a run waits out the lull."""
    keeps = KeepsFirst(patience=5, lull=0.3)
    arrived = asyncio.Event()

    async def request() -> None:
        with keeps.keeping():
            arrived.set()
            await asyncio.sleep(0.05)

    first = asyncio.create_task(request())
    await arrived.wait()
    await request()  # on top of the first
    await first
    assert keeps.in_flight == 0
    start = time.perf_counter()
    await keeps.settled()
    assert 0.2 < time.perf_counter() - start < 4
