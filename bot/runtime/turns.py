"""Drive a run one model turn at a time, so that the runtime can checkpoint after each.

One `Runner.run_streamed` call per turn: `cancel(mode="after_turn")` is asked once the first
raw model event arrives (not earlier: a cancel before the model starts stops after zero
turns). The turn's tools still run; the run stops before the next model call. A turn that
outlives `time_limit`, or whose caller is cancelled (shutdown), stops the SDK's run at once."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Agent, RunConfig, Runner, RunResultStreaming, RunState, TResponseInputItem
from agents.memory import Session


async def run_one_turn(
    agent: Agent[Any],
    start: str | list[TResponseInputItem] | RunState[Any],
    *,
    session: Session,
    run_config: RunConfig,
    max_turns: int,
    time_limit: float,
) -> RunResultStreaming:
    result = Runner.run_streamed(
        agent, start, session=session, run_config=run_config, max_turns=max_turns
    )
    cancel_asked = False
    try:
        async with asyncio.timeout(time_limit):
            async for event in result.stream_events():
                if not cancel_asked and event.type == "raw_response_event":
                    result.cancel(mode="after_turn")
                    cancel_asked = True
    except BaseException:
        result.cancel()  # immediate: the SDK's background task must not run on
        raise
    return result
