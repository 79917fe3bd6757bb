"""The chaos run's people: what a stop, discard or decision waits for and how one under
way is counted (the run is quiet only when none is)."""

from __future__ import annotations

import asyncio
from typing import Any

from bench.chaos.people import People, ThreadState
from bench.chaos.plan import ThreadPlan
from bot.standin.slack_api import SlackWebApi


def thread() -> ThreadState:
    return ThreadState(ThreadPlan(3, "C1", "UALICE", [], []))


async def test_a_moment_is_reached_only_before_the_run_ends() -> None:
    quit = asyncio.Event()
    came = thread()
    came.moments["card"].set()
    assert await came.reached("card", quit)
    ended = thread()
    quit.set()
    assert not await ended.reached("card", quit)
    ended.moments["card"].set()
    assert not await ended.reached("card", quit)


async def test_a_slip_while_deciding_is_noted_and_the_count_restored() -> None:
    notes: list[tuple[str, dict[str, Any]]] = []
    api = SlackWebApi(token="xoxb-test")
    people = People(api, None, lambda k, **d: notes.append((k, d)))  # type: ignore[arg-type]
    during: list[int] = []

    async def slips() -> str:
        async with people.deciding_in(thread(), "stopper_error"):
            during.append(people.deciding)
            raise ValueError("a harness slip")
        return "the run goes on"

    assert await slips() == "the run goes on"
    assert during == [1]
    assert people.deciding == 0
    assert notes == [("stopper_error", {"thread": 3, "error": "ValueError('a harness slip')"})]

    async def returns() -> int:
        async with people.deciding_in(thread(), "decider_error"):
            return people.deciding

    assert await returns() == 1
    assert people.deciding == 0
    assert len(notes) == 1
