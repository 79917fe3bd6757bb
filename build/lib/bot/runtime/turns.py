"""Drive a run one model turn at a time, so that the runtime can checkpoint after each.

One `Runner.run_streamed` call per turn: `cancel(mode="after_turn")` is asked once the first
raw model event arrives (not earlier: a cancel before the model starts stops after zero
turns). The turn's tools still run; the run stops before the next model call. A turn that
outlives `time_limit`, or whose caller is cancelled (shutdown), stops the SDK's run at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent, RunConfig, Runner, RunResultStreaming, RunState, TResponseInputItem
from agents.memory import Session

TEXT_DELTA = "response.output_text.delta"


async def run_one_turn(
    agent: Agent[Any],
    start: str | list[TResponseInputItem] | RunState[Any],
    *,
    session: Session,
    run_config: RunConfig,
    max_turns: int,
    time_limit: float,
    on_text: Callable[[str], Awaitable[None]] | None = None,
    context: Any = None,
) -> RunResultStreaming:
    """One turn; `on_text` sees the answer's text as the model streams it; `context` is the
    run context tools get (it replaces the one a resumed state carries)."""
    result = Runner.run_streamed(
        agent, start, context=context, session=session, run_config=run_config, max_turns=max_turns
    )
    cancel_asked = False
    try:
        async with asyncio.timeout(time_limit):
            async for event in result.stream_events():
                if event.type != "raw_response_event":
                    continue
                if not cancel_asked:
                    result.cancel(mode="after_turn")
                    cancel_asked = True
                data = event.data
                if (
                    on_text is not None
                    and getattr(data, "type", "") == "response.output_text.delta"
                ):
                    await on_text(str(getattr(data, "delta", "")))
    except BaseException:
        result.cancel()  # immediate: the SDK's background task must not run on
        raise
    return result
