"""Drive a run until its next checkpoint: one `Runner.run_streamed` call for the turns
between two checkpoints.

A turn whose tools are all harmless to run again (or that has none) needs no checkpoint of
its own: after a crash it is simply run again. A side-effecting call always pauses the run
before it runs (`guard`), which ends this call with the call waiting, to be checkpointed.
So the run goes on, turn after turn, until it pauses, finishes, or `checkpoint_due()` says
it has done enough since the last checkpoint (or the process is stopping): then
`cancel(mode="after_turn")` lets the turn in progress end (its tools still run) and stops
before the next model call. It is asked from the model's events (a cancel before the run's
first model call would stop a resumed run after the calls it resumes, before any turn).

Each model call (with the tools its turn runs) may take `time_limit`: the clock starts
again when the next one begins. A turn over it, or a caller cancelled (shutdown), stops the
SDK's run at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent, RunConfig, Runner, RunResultStreaming, RunState, TResponseInputItem
from agents.memory import Session

TEXT_DELTA = "response.output_text.delta"
TURN_BEGINS = "response.created"  # the first event of each model call


def answer_checked(agent: Agent[Any], run_config: RunConfig) -> bool:
    """The agent's final answer must pass output guardrails first (its own, or the run's).
    The SDK runs them once the answer is whole, so its text is not shown while the model
    writes it: a check that trips must not find it already in the thread. The thread still
    sees the run work (its status, its tool steps) and gets the answer once it passes."""
    return bool(agent.output_guardrails or run_config.output_guardrails)


def every_turn() -> bool:
    """A checkpoint after every turn."""
    return True


async def run_turns(
    agent: Agent[Any],
    start: str | list[TResponseInputItem] | RunState[Any],
    *,
    session: Session,
    run_config: RunConfig,
    max_turns: int,
    time_limit: float,
    on_text: Callable[[str], Awaitable[None]] | None = None,
    context: Any = None,
    checkpoint_due: Callable[[], bool] = every_turn,
) -> RunResultStreaming:
    """Turns until the next checkpoint; `on_text` sees the answer's text as the model
    streams it (unless output guardrails check it first: `answer_checked`); `context` is
    the run context tools get (it replaces the one a resumed state carries)."""
    result = Runner.run_streamed(
        agent, start, context=context, session=session, run_config=run_config, max_turns=max_turns
    )
    cancel_asked = False
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(time_limit) as turn_clock:
            async for event in result.stream_events():
                if event.type != "raw_response_event":
                    continue
                if not cancel_asked and checkpoint_due():
                    result.cancel(mode="after_turn")
                    cancel_asked = True
                data = event.data
                kind = getattr(data, "type", "")
                if kind == TURN_BEGINS:
                    turn_clock.reschedule(loop.time() + time_limit)
                elif (
                    kind == TEXT_DELTA
                    and on_text is not None
                    and not answer_checked(result.current_agent, run_config)
                ):
                    await on_text(str(getattr(data, "delta", "")))
    except BaseException:
        result.cancel()  # immediate: the SDK's background task must not run on
        raise
    return result
