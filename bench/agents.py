"""The agent every benchmark runs, in process or in a real bot (`BOT_AGENT=bench.agents:
build_agent`): a deterministic scripted model that never runs out of steps, and three tools.

The model answers from the input alone (any process, before or after a crash, answers
alike): after a tool's output it answers `done: <output>`; a message naming `email`,
`transfer` or `lookup` gets a call to that tool (with a fresh call id, as a real model
makes); anything else gets `echo: <message>`. `BENCH_MODEL_DELAY` (seconds) makes every
model call take that long; `BENCH_ANSWER_DELAY` only the answers that follow a tool's output
(so that a run can be caught between its turns). `BENCH_PEAK_FILE` names a file that holds
the most model calls in progress at once so far (the admission benchmark reads it)."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

from agents import Agent, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.runtime import retry_safe, split_author

REFILL = 64


def _texts(call_input: Any) -> list[dict[str, Any]]:
    if isinstance(call_input, str):
        return [{"role": "user", "content": call_input}]
    return [item for item in call_input if isinstance(item, dict)]


def _user_text(items: list[dict[str, Any]]) -> str:
    """The latest user message's own text (without its author's header)."""
    for item in reversed(items):
        if item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return split_author(content)[1]
            return split_author(
                " ".join(
                    str(part.get("text", "")) for part in content or [] if isinstance(part, dict)
                )
            )[1]
    return ""


class BenchModel(ScriptedModel):
    """Scripted, endless: every call is answered by `respond`; calls are not kept."""

    def __init__(self, delay: float = 0.0, answer_delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay
        self.answer_delay = answer_delay
        self.calls_made = 0

    in_flight = 0  # model calls in progress in this process, all models
    peak = 0

    async def respond(self, call: Any) -> Any:
        BenchModel.in_flight += 1
        if BenchModel.in_flight > BenchModel.peak:
            BenchModel.peak = BenchModel.in_flight
            peak_file = os.getenv("BENCH_PEAK_FILE")
            if peak_file:
                Path(peak_file).write_text(str(BenchModel.peak))  # noqa: ASYNC240 (tiny)
        try:
            return await self._respond(call)
        finally:
            BenchModel.in_flight -= 1

    async def _respond(self, call: Any) -> Any:
        self.calls_made += 1
        items = _texts(call.input)
        last = items[-1] if items else {}
        if last.get("type") == "function_call_output":
            await asyncio.sleep(self.delay + self.answer_delay)
            return [assistant_message(f"done: {last.get('output')}")]
        if self.delay:
            await asyncio.sleep(self.delay)
        text = _user_text(items)
        words = text.lower()
        call_id = f"call_{uuid.uuid4().hex[:12]}"
        if "email" in words:
            return [
                function_call(
                    "send_email", {"to": "ana@example.com", "body": text}, call_id=call_id
                )
            ]
        if "transfer" in words:
            return [function_call("transfer", {"amount": 5, "to": "bob"}, call_id=call_id)]
        if "lookup" in words:
            return [function_call("lookup", {"topic": text[-40:]}, call_id=call_id)]
        return [assistant_message(f"echo: {text}")]

    async def _next_resolved_step(self, call: Any) -> Any:
        if self.remaining_steps < 2:
            self.extend([ModelStep.respond(self.respond) for _ in range(REFILL)])
        self._calls.clear()  # a long benchmark must not keep every call's input
        return await super()._next_resolved_step(call)


@function_tool
def lookup(topic: str) -> str:
    """Look a topic up (read-only)."""
    return f"facts about {topic}: " + "lorem ipsum dolor sit amet " * 4


@function_tool
def send_email(to: str, body: str) -> str:
    """Send an email (a side effect; the runtime approves it itself)."""
    return f"sent to {to}"


@function_tool(needs_approval=True)
def transfer(amount: int, to: str) -> str:
    """Transfer money (a side effect a person approves)."""
    return f"transferred {amount} to {to}"


def build_agent(delay: float | None = None, answer_delay: float | None = None) -> Agent[Any]:
    model = BenchModel(
        float(os.getenv("BENCH_MODEL_DELAY", "0")) if delay is None else delay,
        float(os.getenv("BENCH_ANSWER_DELAY", "0")) if answer_delay is None else answer_delay,
    )
    return Agent(
        name="assistant",
        instructions="Answer briefly; use the tools when asked.",
        model=model,
        tools=[retry_safe(lookup), send_email, transfer],
    )
