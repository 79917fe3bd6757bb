"""A bot runtime in a child process that kills itself (SIGKILL) at a chosen boundary.

    python -m testkit.crash_child run BOUNDARY N EFFECTS OUT   handle "email Ana", die at N-th hit
    python -m testkit.crash_child recover - 0 EFFECTS OUT      recover, write outcomes to OUT
    python -m testkit.crash_child run-guarded after_commit 1 EFFECTS OUT
        a message the agent's input guardrail refuses, die right after the commit that ends
        the turn (before its answer is delivered)
    python -m testkit.crash_child stop-human after_commit 1 EFFECTS OUT
        (after `run-human`) the starter says `stop`: die right after the stop's commit

The model is deterministic in what it does (lookup, then send_email, then answer) but invents
fresh call ids on every call, as a real model does; so only the runtime's pre-call
checkpoint keeps a side-effecting call's id stable across a crash."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunContextWrapper,
    function_tool,
    input_guardrail,
)
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.runtime import ConversationRuntime, retry_safe
from bot.settings import RuntimeSettings
from storage import Store, open_store
from testkit.runtime import KEY, SideEffects

BOUNDARIES = (
    "after_model_response",
    "before_side_effect",
    "after_side_effect",
    "between_blob_and_commit",
    "after_commit",
)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Trigger:
    def __init__(self, boundary: str, nth: int) -> None:
        self.boundary, self.nth, self.hits = boundary, nth, 0

    def hit(self, boundary: str) -> None:
        if boundary == self.boundary:
            self.hits += 1
            if self.hits == self.nth:
                die()


def respond(call: Any) -> Any:
    items = call.input if isinstance(call.input, list) else []
    names = {i["call_id"]: i["name"] for i in items if i.get("type") == "function_call"}
    outputs = {
        names.get(i["call_id"]): str(i.get("output"))
        for i in items
        if i.get("type") == "function_call_output"
    }
    fresh_id = f"call-{uuid.uuid4().hex[:8]}"
    if "lookup" not in outputs:
        return [function_call("lookup", {"topic": "Ana"}, call_id=fresh_id)]
    if "send_email" not in outputs:
        return [function_call("send_email", {"to": "ana@example.com"}, call_id=fresh_id)]
    verdict = "unknown" if "unknown" in outputs["send_email"] else "sent"
    return [assistant_message(f"Done: email {verdict}.")]


class KillingModel(ScriptedModel):
    def __init__(self, trigger: Trigger) -> None:
        super().__init__([ModelStep.respond(respond) for _ in range(10)])
        self.trigger = trigger

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async for event in super().stream_response(*args, **kwargs):
            yield event
        self.trigger.hit("after_model_response")


@input_guardrail(name="no_secrets", run_in_parallel=False)
def no_secrets(
    ctx: RunContextWrapper[Any], agent: Agent[Any], text: Any
) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered="password" in str(text))


def build(trigger: Trigger, effects: SideEffects, *, human: bool = False) -> Agent[Any]:
    @function_tool
    def lookup(topic: str) -> str:
        """Read-only lookup."""
        return f"{topic} prefers email"

    @function_tool(needs_approval=human)
    def send_email(to: str) -> str:
        """Send an email (a side effect; a person approves it when `human`)."""
        trigger.hit("before_side_effect")
        effects.record("send_email", {"to": to})
        trigger.hit("after_side_effect")
        return f"sent to {to}"

    return Agent(
        name="assistant",
        model=KillingModel(trigger),
        tools=[retry_safe(lookup), send_email],
        input_guardrails=[no_secrets],
    )


def instrument(store: Store, trigger: Trigger) -> None:
    put_blob, apply = store.put_blob, store.apply

    def put_then_maybe_die(object_key: str, data: bytes) -> None:
        put_blob(object_key, data)
        if object_key.startswith("checkpoints/"):
            trigger.hit("between_blob_and_commit")

    def apply_then_maybe_die(commit: Any) -> Any:
        done = apply(commit)
        if done.checkpoint is not None:
            trigger.hit("after_commit")
        return done

    store.put_blob = put_then_maybe_die  # type: ignore[method-assign]
    store.apply = apply_then_maybe_die  # type: ignore[method-assign]


async def main(mode: str, boundary: str, nth: str, effects_path: str) -> list[Any]:
    trigger = Trigger(boundary, int(nth))
    store = open_store()
    instrument(store, trigger)
    human = mode.endswith("-human")
    runtime = ConversationRuntime(
        store, build(trigger, SideEffects(Path(effects_path)), human=human), RuntimeSettings()
    )
    if mode == "run-guarded":
        text = "my password is plum"
        outcomes = await runtime.handle_message(KEY, event_id="Ev1", user="U1", text=text)
    elif mode.startswith("run"):
        outcomes = await runtime.handle_message(KEY, event_id="Ev1", user="U1", text="email Ana")
    elif mode == "stop-human":
        outcomes = await runtime.handle_message(KEY, event_id="Ev2", user="U1", text="stop")
    elif mode.startswith("recover"):
        outcomes = await runtime.recover()
    else:  # approve-human: decide the pending call as the user who asked
        record = store.get(KEY)
        assert record is not None and record.checkpoint is not None
        envelope = store.load_checkpoint(record.checkpoint)
        outcomes = await runtime.decide(
            KEY,
            call_id=envelope["awaiting"][0]["call_id"],
            approve=True,
            user="U1",
            checkpoint_version=record.checkpoint.version,
        )
    return outcomes


if __name__ == "__main__":
    *args, out = sys.argv[1:]
    results = asyncio.run(main(*args))
    lines = [json.dumps({"type": type(o).__name__, **o.model_dump(mode="json")}) for o in results]
    Path(out).write_text("".join(line + "\n" for line in lines))
