"""Keeps first: a run does not start while Slack requests are in flight (at most
`short_patience`; after a crowd of them, until the burst is over, at most `patience`), so a
burst's acknowledgements are not queued behind its runs, and steady traffic never holds
runs back for long."""

from __future__ import annotations

import asyncio
import time

from agents.testing import ScriptedModel, assistant_message

from bot.runtime import Answer, ConversationRuntime
from bot.runtime.acks_first import AcksFirst
from storage import Store
from testkit.runtime import KEY, SideEffects, build_agent


async def test_nothing_in_flight_means_no_wait() -> None:
    keeps = AcksFirst(patience=5, short_patience=5)
    start = time.perf_counter()
    await keeps.settled()
    assert time.perf_counter() - start < 0.5


async def test_a_run_waits_for_the_last_keep_in_flight() -> None:
    keeps = AcksFirst(patience=5, short_patience=5)
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
    keeps = AcksFirst(patience=30, short_patience=0.2)
    with keeps.keeping():  # one request: not a crowd
        start = time.perf_counter()
        await keeps.settled()
        waited = time.perf_counter() - start
    assert 0.15 < waited < 2


async def test_after_a_crowd_a_run_waits_longer_but_not_for_ever() -> None:
    keeps = AcksFirst(patience=0.6, short_patience=0.01, lull=30, crowd=2)
    done = asyncio.Event()

    async def request() -> None:
        with keeps.keeping():
            await done.wait()

    requests = [asyncio.create_task(request()) for _ in range(2)]  # a crowd of two
    await asyncio.sleep(0.05)
    assert keeps.crowded
    start = time.perf_counter()
    await keeps.settled()
    waited = time.perf_counter() - start
    done.set()
    await asyncio.gather(*requests)
    assert 0.45 < waited < 3


async def test_serving_starts_once_the_keeps_in_flight_are_done(
    store: Store, effects: SideEffects
) -> None:
    rt = ConversationRuntime(
        store, build_agent(ScriptedModel([[assistant_message("Hello!")]]), effects)
    )
    rt.acks_first.short_patience = 30
    await rt.intake.keep_message(KEY, event_id="Ev1", user="U1", text="hi", take=True)
    with rt.acks_first.keeping():  # another message of the burst, still being kept
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
    rt.acks_first.short_patience = 30
    await rt.intake.keep_message(KEY, event_id="Ev1", user="U1", text="hi", take=True)
    with rt.acknowledging():  # a request of the burst, not yet answered
        serving = asyncio.create_task(rt.serve(KEY))
        await asyncio.sleep(0.3)
        assert not serving.done()
    assert await asyncio.wait_for(serving, 30) == [Answer(key=KEY, text="Hello!")]


async def test_a_lone_request_does_not_hold_its_own_run_back() -> None:
    """Its keep inside it is the same request, not a second one on top of it."""
    keeps = AcksFirst(patience=5, short_patience=5, lull=5, crowd=2)
    with keeps.keeping(), keeps.keeping():
        assert keeps.in_flight == 1
    start = time.perf_counter()
    await keeps.settled()
    assert time.perf_counter() - start < 1


async def test_after_a_crowd_a_run_waits_for_a_lull() -> None:
    """A burst still arriving has gaps between its requests: a run waits out the lull."""
    keeps = AcksFirst(patience=5, lull=0.3, crowd=2)
    arrived = asyncio.Event()

    async def request() -> None:
        with keeps.keeping():
            arrived.set()
            await asyncio.sleep(0.05)

    first = asyncio.create_task(request())
    await arrived.wait()
    await request()  # on top of the first: a crowd of two
    await first
    assert keeps.in_flight == 0 and keeps.crowded
    start = time.perf_counter()
    await keeps.settled()
    assert 0.2 < time.perf_counter() - start < 4


async def test_steady_traffic_does_not_hold_runs_back() -> None:
    """Requests that overlap two at a time and arrive fewer than `crowd` to a `lull` are not
    a burst: a run waits only for those in flight, never for a lull."""
    keeps = AcksFirst(patience=30, short_patience=30, lull=0.05, crowd=3)

    async def request() -> None:
        with keeps.keeping():
            await asyncio.sleep(0.04)

    requests = []
    for _ in range(6):  # 0.03 s apart, 0.04 s each: two in flight at most
        requests.append(asyncio.create_task(request()))
        await asyncio.sleep(0.03)
        assert not keeps.crowded
    await asyncio.gather(*requests)
    start = time.perf_counter()
    await keeps.settled()
    assert time.perf_counter() - start < 1


async def test_a_burst_of_arrivals_is_a_crowd_however_fast_it_is_kept() -> None:
    """On sqlite a burst's requests are kept so fast that few are in flight at once: the
    arrivals are what make it a burst."""
    keeps = AcksFirst(lull=0.5, crowd=4)
    for _ in range(4):
        with keeps.keeping():
            pass  # kept at once: never two in flight
    assert keeps.crowded


async def test_a_crowd_in_flight_is_a_burst_until_a_lull_after_it() -> None:
    """A burst's requests arrive at once and then wait for their keeps: while `crowd` are
    in flight, and for a lull after, a run waits."""
    keeps = AcksFirst(patience=30, lull=0.2, crowd=3)
    held = asyncio.Event()

    async def request() -> None:
        with keeps.keeping():
            await held.wait()

    requests = []
    for _ in range(3):  # spaced out: never three arrivals within a lull
        requests.append(asyncio.create_task(request()))
        await asyncio.sleep(0.25)
    assert keeps.crowded  # three in flight
    waiter = asyncio.create_task(keeps.settled())
    held.set()
    await asyncio.gather(*requests)
    await asyncio.sleep(0.05)
    assert not waiter.done()  # the lull after the crowd
    await asyncio.wait_for(waiter, 5)
