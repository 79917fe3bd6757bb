"""A lone surrogate (what `json.loads` makes of a broken `\\ud83d` escape) in what the runtime
keeps, a tool's output in a checkpoint or a text in a kept payload, is kept exactly, on
both backends: the run is saved and goes on."""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from bot.runtime import Answer, ConversationRuntime, Decided
from bot.runtime.envelope import (
    Envelope,
    HeldMessage,
    UserMessage,
    parse_payload,
    payload_text,
)
from bot.settings import RuntimeSettings
from storage import CheckpointMeta, Store
from testkit.runtime import KEY, SideEffects, asked, build_agent, decide, email_then_answer, history

BROKEN: str = json.loads('"tides \\ud83d"')


def reads_a_broken_page(effects: SideEffects) -> Agent[Any]:
    @function_tool
    def read_page(url: str) -> str:
        """Read a page (a service whose JSON had a broken escape)."""
        effects.record("read_page", {"url": url})
        return BROKEN

    @function_tool(needs_approval=True)
    def send_email(to: str, body: str) -> str:
        """Send an email (a side effect)."""
        effects.record("send_email", {"to": to})
        return f"sent to {to}"

    model = ScriptedModel(
        [
            [function_call("read_page", {"url": "https://example.com"}, call_id="c1")],
            [function_call("send_email", {"to": "ana@example.com", "body": "hi"}, call_id="c2")],
            [assistant_message("Done.")],
        ]
    )
    return Agent(name="assistant", model=model, tools=[read_page, send_email])


async def test_a_run_whose_tool_output_holds_one_is_saved_and_resumed(
    store: Store, effects: SideEffects
) -> None:
    """Its output is in the checkpoint of the pause that follows, and in the history."""
    rt = ConversationRuntime(store, reads_a_broken_page(effects), RuntimeSettings())
    request = await asked(rt, "read it", event_id="Ev1")
    outcomes = await decide(rt, request, "c2")
    assert [type(outcome) for outcome in outcomes] == [Decided, Answer]
    outputs = [item["output"] for item in history(store) if "output" in item]
    assert outputs == [BROKEN, "sent to ana@example.com"]
    assert [call["tool"] for call in effects.calls()] == ["read_page", "send_email"]


async def test_an_inbox_payload_keeps_one(store: Store, effects: SideEffects) -> None:
    """A decision is kept as a payload before it is served; pydantic's own JSON could not
    write this one, and the click was lost."""
    rt = ConversationRuntime(store, build_agent(email_then_answer(), effects), RuntimeSettings())
    request = await asked(rt, event_id="Ev1")
    outcomes = await decide(rt, request, "call-email", request_message=BROKEN)
    assert [type(outcome) for outcome in outcomes] == [Decided, Answer]
    assert isinstance(outcomes[0], Decided) and outcomes[0].request_message == BROKEN
    message = UserMessage(user="U1", text=BROKEN)
    assert parse_payload(payload_text(message)) == message


def test_an_envelope_keeps_one(store: Store) -> None:
    run_state: dict[str, Any] = {"$schemaVersion": "1.21", "output": BROKEN}
    envelope = Envelope(
        run_state=run_state,
        started_by="U1",
        held=[HeldMessage(user="U1", text=BROKEN)],
        outbox=[{"text": BROKEN}],
    )
    lease, record = store.acquire(KEY, "w")
    done = store.commit(
        lease,
        state=envelope.document(),
        meta=CheckpointMeta(schema_version="1.21", agent_fingerprint="fp"),
        expected_version=record.checkpoint_version,
    )
    assert done.checkpoint is not None
    assert Envelope.model_validate(store.load_checkpoint(done.checkpoint)) == envelope
