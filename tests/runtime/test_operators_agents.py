"""Agents shaped as operators write them (issue 25), in process, on both backends: a
`handoff()` object's target, an agent used as a tool, guardrails, tool kinds the bot cannot
guard, a fingerprint that sees all of it, and a checkpoint written by a newer version."""

from __future__ import annotations

from typing import Any

import pytest
from agents import (
    Agent,
    ComputerTool,
    GuardrailFunctionOutput,
    WebSearchTool,
    function_tool,
    handoff,
    input_guardrail,
)
from agents.mcp import MCPServerStdio
from agents.testing import ScriptedModel, assistant_message, function_call

from bot.runtime import (
    Answer,
    ApprovalRequest,
    ConversationRuntime,
    Decided,
    Notice,
    NoticeKind,
    idempotent,
    retry_safe,
)
from bot.runtime.fingerprint import agent_fingerprint
from bot.runtime.guard import UnguardedTool
from storage import CheckpointMeta, Status, Store
from testkit.runtime import KEY, SideEffects, decide, record_of


def transfer_tool(effects: SideEffects) -> Any:
    @function_tool(needs_approval=True)
    def transfer(amount: int) -> str:
        """Move money (a side effect)."""
        effects.record("transfer", {"amount": amount})
        return f"moved {amount}"

    return transfer


def transferring(
    name: str, effects: SideEffects, amount: int, *, call_id: str, then: str
) -> Agent[Any]:
    """An agent that asks to transfer `amount` (its call `call_id`), then answers `then`."""
    return Agent(
        name=name,
        model=ScriptedModel(
            [
                [function_call("transfer", {"amount": amount}, call_id=call_id)],
                [assistant_message(then)],
            ]
        ),
        tools=[transfer_tool(effects)],
    )


async def approve_all(rt: ConversationRuntime, outcomes: list[Any]) -> list[Any]:
    [request] = [o for o in outcomes if isinstance(o, ApprovalRequest)]
    return await decide(rt, request, request.calls[0].call_id)


async def test_a_handoff_objects_target_is_guarded(store: Store, effects: SideEffects) -> None:
    payments = transferring("payments", effects, 5, call_id="c-t", then="paid")
    triage = Agent(
        name="triage",
        model=ScriptedModel([[function_call("transfer_to_payments", {}, call_id="c-h")]]),
        handoffs=[handoff(payments)],
    )
    rt = ConversationRuntime(store, triage)
    first = await rt.handle_message(KEY, event_id="E1", user="U1", text="pay 5")
    assert [c.tool_name for o in first if isinstance(o, ApprovalRequest) for c in o.calls] == [
        "transfer"
    ]
    done = await approve_all(rt, first)
    assert Answer(key=KEY, text="paid") in done
    assert [e["amount"] for e in effects.calls("transfer")] == [5]
    # The same call id seen again (a crash after the side effect, resumed from the
    # checkpoint before it) returns the recorded output: the ledger holds it.
    call = store.get_tool_call(KEY, "c-t")
    assert call is not None and call.output == "moved 5"


async def test_an_approval_inside_an_agent_used_as_a_tool(
    store: Store, effects: SideEffects, caplog: pytest.LogCaptureFixture
) -> None:
    mailer = transferring("mailer", effects, 7, call_id="c-in", then="ok")
    boss = Agent(
        name="boss",
        model=ScriptedModel(
            [
                [function_call("pay", {"input": "pay 7"}, call_id="c-out")],
                [assistant_message("all done")],
            ]
        ),
        tools=[mailer.as_tool("pay", "pays")],
    )
    rt = ConversationRuntime(store, boss)
    first = await rt.handle_message(KEY, event_id="E1", user="U1", text="pay 7")
    [request] = [o for o in first if isinstance(o, ApprovalRequest)]
    assert [c.call_id for c in request.calls] == ["c-in"]  # the nested run's own call
    assert record_of(store).status is Status.AWAITING_APPROVAL
    # Another runtime (a restart) decides it, from the checkpoint alone.
    again = ConversationRuntime(store, boss)
    done = await approve_all(again, first)
    assert [type(o) for o in done] == [Decided, Answer]
    assert [e["amount"] for e in effects.calls("transfer")] == [7]
    assert (store.get_tool_call(KEY, "c-in") or pytest.fail()).output == "moved 7"
    # The nested run's saved state is restored with the run context too (no SDK warning
    # that it "requires explicit restoration").
    sdk_warnings = [r for r in caplog.records if r.name == "openai.agents" and r.levelno >= 30]
    assert sdk_warnings == [], [r.getMessage() for r in sdk_warnings]


async def test_a_guardrail_trip_is_an_answer_not_a_failure(
    store: Store, effects: SideEffects
) -> None:
    @input_guardrail(name="no_secrets")
    def no_secrets(ctx: Any, agent: Any, text: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered="password" in str(text))

    agent = Agent(
        name="assistant",
        model=ScriptedModel([[assistant_message("(never)")], [assistant_message("hello")]]),
        input_guardrails=[no_secrets],
    )
    rt = ConversationRuntime(store, agent)
    outcomes = await rt.handle_message(KEY, event_id="E1", user="U1", text="my password is x")
    [notice] = [o for o in outcomes if isinstance(o, Notice)]
    assert notice.kind is NoticeKind.GUARDRAIL and "`no_secrets`" in notice.text
    record = record_of(store)
    assert record.status is Status.IDLE and store.read_inbox(KEY) == []
    [reply] = await rt.scheduler.resume(KEY, user="U1")  # nothing to replay into the tripwire
    assert "nothing to resume" in reply.text.lower()  # type: ignore[attr-defined]
    assert Answer(key=KEY, text="hello") in await rt.handle_message(
        KEY, event_id="E2", user="U1", text="hi"
    )


def test_a_tool_the_bot_cannot_guard_is_refused_at_load(store: Store) -> None:
    computer: ComputerTool[Any] = ComputerTool(computer=object())
    helper = Agent(name="helper", tools=[computer])
    agent = Agent(name="front", tools=[WebSearchTool()], handoffs=[handoff(helper)])
    with pytest.raises(UnguardedTool, match=r"agent 'helper': tool .*ComputerTool"):
        ConversationRuntime(store, agent)
    retry_safe(computer)  # the operator says running it again is harmless
    ConversationRuntime(store, agent)


def test_an_mcp_server_the_sdk_would_retry_is_refused_unless_its_calls_may_repeat(
    store: Store,
) -> None:
    """`max_retry_attempts` makes the SDK send a call that timed out again by itself: a side
    effect could happen twice. Allowed only where every call may repeat (retry-safe, or
    keyed: each attempt carries the same key)."""

    def agent(server: MCPServerStdio) -> Agent[Any]:
        return Agent(name="payer", mcp_servers=[server])

    def retrying() -> MCPServerStdio:
        return MCPServerStdio({"command": "true"}, name="payments", max_retry_attempts=2)

    with pytest.raises(UnguardedTool, match=r"'payments' sets max_retry_attempts=2"):
        ConversationRuntime(store, agent(retrying()))
    with pytest.raises(UnguardedTool):  # some of its tools only: the others may not repeat
        ConversationRuntime(store, agent(retry_safe(retrying(), "balance")))
    ConversationRuntime(store, agent(retry_safe(retrying())))
    ConversationRuntime(store, agent(idempotent(retrying(), key_argument="key")))


def test_the_fingerprint_sees_the_whole_graph() -> None:
    def graph(schema_change: bool = False, version: str | None = None) -> Agent[Any]:
        @function_tool
        def refund(amount: int, reason: str = "") -> str:
            """Refund."""
            return ""

        @function_tool
        def refund_v2(amount: int, currency: str) -> str:
            """Refund."""
            return ""

        refund_v2.name = "refund"

        def instructions(ctx: Any, agent: Any) -> str:
            return "be kind"

        if version:
            instructions.version = version  # type: ignore[attr-defined]
        payments = Agent(name="payments", tools=[refund_v2 if schema_change else refund])
        nested = Agent(name="nested", instructions=instructions)
        return Agent(
            name="triage", handoffs=[handoff(payments)], tools=[nested.as_tool("ask", "asks")]
        )

    base = agent_fingerprint(graph())
    assert agent_fingerprint(graph()) == base
    assert agent_fingerprint(graph(schema_change=True)) != base  # behind a handoff() object
    assert agent_fingerprint(graph(version="2")) != base  # dynamic instructions, versioned
    mcp_agent = Agent(name="m")
    mcp_agent.mcp_servers = [type("S", (), {"name": "pay"})()]
    listing = [{"name": "pay", "inputSchema": {"type": "object"}}]
    changed = [{"name": "pay", "inputSchema": {"type": "object", "required": ["x"]}}]
    assert agent_fingerprint(mcp_agent, mcp={"pay": listing}) != agent_fingerprint(
        mcp_agent, mcp={"pay": changed}
    )


async def test_a_checkpoint_of_a_newer_version_is_left_alone(
    store: Store, effects: SideEffects
) -> None:
    agent = Agent(
        name="assistant",
        model=ScriptedModel([[function_call("transfer", {"amount": 1}, call_id="c1")]]),
        tools=[transfer_tool(effects)],
    )
    rt = ConversationRuntime(store, agent)
    await rt.handle_message(KEY, event_id="E1", user="U1", text="pay 1")
    record = record_of(store)
    assert record.checkpoint is not None
    lease, _ = store.acquire(KEY, "newer-replica")
    store.commit(
        lease,
        state=store.load_checkpoint(record.checkpoint),
        meta=CheckpointMeta(schema_version="1.99", agent_fingerprint=rt.parts.fingerprint),
        expected_version=record.checkpoint.version,
        status=Status.AWAITING_APPROVAL,
    )
    store.release(lease, status=Status.AWAITING_APPROVAL, delivered=True)
    outcomes = await rt.handle_message(KEY, event_id="E2", user="U1", text="and?")
    assert not [o for o in outcomes if isinstance(o, Notice)]  # nothing set aside, nothing said
    after = record_of(store)
    assert after.status is Status.RUNNING and after.lease_owner is None  # for a newer replica
    assert after.checkpoint is not None and after.checkpoint.schema_version == "1.99"
    assert [e.event_id for e in store.read_inbox(KEY)] == ["E2"]
    assert effects.calls() == []
