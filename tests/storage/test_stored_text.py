"""Text UTF-8 cannot carry, a lone surrogate (what `json.loads` makes of a broken `\\ud83d`
escape in a tool's output or the model's text), is stored on both backends: in session
items and checkpoints exactly, since the SDK recognises its own items by digest when it
reconciles a Session write; in the tool ledger's plain text as U+FFFD."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunContextWrapper,
    Runner,
    RunState,
    StopAtTools,
    function_tool,
    output_guardrail,
)
from agents.items import TResponseInputItem
from agents.memory import SessionSettings
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from storage import CheckpointMeta, ConversationSession, Status, Store, ToolCallRecord
from tests.storage.conftest import KEY

BROKEN: str = json.loads('"wrote \\ud83d half an emoji \\ude80"')
META = CheckpointMeta(schema_version="1.21", agent_fingerprint="fp-1")


def digest(items: list[Any]) -> list[str]:
    """What the SDK compares when it reconciles a pending session write."""
    return [json.dumps(item, sort_keys=True) for item in items]


async def test_session_items_keep_a_lone_surrogate_exactly(store: Store) -> None:
    items: list[TResponseInputItem] = [
        {"role": "user", "content": BROKEN},
        {"type": "function_call_output", "call_id": "c1", "output": BROKEN},
    ]
    await ConversationSession(store, KEY).add_items(items)
    again = await ConversationSession(store, KEY).get_items()
    assert again == items
    assert digest(again) == digest(items)
    assert await ConversationSession(store, KEY).pop_item() == items[-1]


async def test_a_checkpoint_and_its_items_keep_a_lone_surrogate_exactly(store: Store) -> None:
    lease, _ = store.acquire(KEY, "w")
    staged = ConversationSession(store, KEY, lease=lease, staged=True)
    await staged.add_items([{"role": "assistant", "content": BROKEN}])
    document = {"$schemaVersion": "1.21", "text": BROKEN, "nested": [{BROKEN: BROKEN}]}
    done = store.commit(
        lease,
        state=document,
        meta=META,
        expected_version=0,
        items=staged.pending,
        base_seq=staged.base_seq,
    )
    assert done.checkpoint is not None
    assert store.load_checkpoint(done.checkpoint) == document
    assert await ConversationSession(store, KEY).get_items() == [
        {"role": "assistant", "content": BROKEN}
    ]
    # RunState.to_string() escapes it itself: stored and read back the same.
    again = store.commit(
        lease, state=json.dumps(document), meta=META, expected_version=done.checkpoint.version
    )
    assert again.checkpoint is not None
    assert store.load_checkpoint(again.checkpoint) == document


def test_the_tool_ledger_keeps_a_lone_surrogate_as_a_replacement_character(
    store: Store,
) -> None:
    """Its output is plain text, read back as the tool's output when the call is not run
    again: U+FFFD in place of what no text encoding holds."""
    clean = BROKEN.replace("\ud83d", "\ufffd").replace("\ude80", "\ufffd")
    lease, _ = store.acquire(KEY, "w")
    store.begin_tool_call(lease, "c1", "write", json.dumps({"q": "x"})[:-1] + BROKEN + "}")
    assert store.complete_tool_call(lease, "c1", BROKEN)
    record = store.get_tool_call(KEY, "c1")
    assert record is not None
    assert (record.output, record.arguments) == (clean, '{"q": "x"' + clean + "}")
    armed = ToolCallRecord.model_validate(
        record.model_dump() | {"call_id": "c2", "arguments": BROKEN, "output": None}
    )
    store.commit(lease, state={"s": 1}, meta=META, expected_version=0, arm=[armed])
    second = store.get_tool_call(KEY, "c2")
    assert second is not None and second.arguments == clean
    # Completing it again with the very same output is recognised as done.
    store.begin_tool_call(lease, "c3", "write", "{}")
    assert store.complete_tool_call(lease, "c3", BROKEN)
    done = store.get_tool_call(KEY, "c3")
    assert done is not None and done.output == clean


# -- the SDK's reconciliation of a Session write, with a lone surrogate in the batch -------


@function_tool(name_override="look_up")
def look_up(query: str) -> str:
    return f"schema for {query}"


@function_tool(name_override="write_thing", needs_approval=True)
def write_thing(query: str) -> str:
    return BROKEN


@output_guardrail
async def always_fine(
    ctx: RunContextWrapper[Any], agent: Agent[Any], output: Any
) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)


def deferring_agent() -> Agent[Any]:
    """As the SDK's own recovery tests build it (tests/deferred_session_writes): the approved
    call's write is held, then settled in one append."""
    return Agent(
        name="deferring",
        model=ScriptedModel(
            [
                ModelStep(output=[function_call("look_up", {"query": "x"}, call_id="call_LOOK")]),
                ModelStep(
                    output=[function_call("write_thing", {"query": "x"}, call_id="call_PARKED")]
                ),
                ModelStep(output=[assistant_message("done")]),
            ]
        ),
        tools=[look_up, write_thing],
        output_guardrails=[always_fine],
        tool_use_behavior=StopAtTools(stop_at_tool_names=["finish"]),
    )


class LosesOneAnswer:
    """A session whose next append lands and then fails, as when the store's answer is lost."""

    def __init__(self, inner: ConversationSession) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.session_settings: SessionSettings | None = inner.session_settings
        self.armed = False

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        return await self.inner.get_items(limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        await self.inner.add_items(items)
        if self.armed:
            self.armed = False
            raise RuntimeError("the append's answer was lost")

    async def pop_item(self) -> TResponseInputItem | None:
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        await self.inner.clear_session()


def checkpointed(store: Store, state: RunState[Any]) -> dict[str, Any]:
    key = KEY.model_copy(update={"thread_ts": "1700000000.000999"})
    lease, record = store.acquire(key, "w", status=Status.RUNNING)
    done = store.commit(
        lease, state=state.to_json(), meta=META, expected_version=record.checkpoint_version
    )
    store.release(lease)
    assert done.checkpoint is not None
    return store.load_checkpoint(done.checkpoint)


@pytest.mark.parametrize("reloaded", [False, True], ids=["live", "checkpointed"])
async def test_a_write_whose_answer_was_lost_is_recognised(store: Store, reloaded: bool) -> None:
    """The SDK reads the session's tail back and compares digests with the batch it holds
    (in memory, or from the checkpoint): a lone surrogate changed on the way would make the
    write look foreign ("Cannot reconcile the pending Session write") and wedge the run."""
    agent = deferring_agent()
    session = LosesOneAnswer(ConversationSession(store, KEY))
    first = await Runner.run(agent, "do the thing", session=session)
    state = await RunState.from_json(agent, checkpointed(store, first.to_state()))
    state.approve(state.get_interruptions()[0])
    session.armed = True
    with pytest.raises(RuntimeError, match="answer was lost"):
        await Runner.run(agent, state, session=session)
    if reloaded:
        state = await RunState.from_json(agent, checkpointed(store, state))
    result = await Runner.run(agent, state, session=session)
    assert result.final_output == "done"
    items = await session.get_items()
    outputs = [item for item in items if item.get("type") == "function_call_output"]
    assert [(item.get("call_id"), item.get("output")) for item in outputs] == [
        ("call_LOOK", "schema for x"),
        ("call_PARKED", BROKEN),
    ]
