"""Agents shaped as operators write them, for tests over real `python -m bot serve` processes
(`BOT_AGENT=testkit.operator_agents:<factory>`), importing only `bot.agent_api`.

Every side effect is recorded outside every process before its tool returns: in
`$EFFECTS_FILE` (one JSON line, fsynced), or at the keyed service `$KEYED_SERVICE_URL`
(`testkit.keyed_service`). The tool then waits while `$HOLD_FILE` exists (a test creates and
removes it), so that a signal lands between the effect and its result."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from agents import (
    Agent,
    ComputerTool,
    GuardrailFunctionOutput,
    RunContextWrapper,
    function_tool,
    handoff,
    input_guardrail,
)
from agents.tool_context import ToolContext

from bot.agent_api import RequestContext, idempotent, retry_safe
from testkit.effects_file import append_effect
from testkit.keyed_service import call

NO_SECRETS = "no_secrets"


def record_effect(tool: str, call_id: str, **fields: Any) -> None:
    append_effect({"tool": tool, "call_id": call_id, **fields})


async def held() -> None:
    """Wait while `$HOLD_FILE` exists (a minute at most): the call is slow to finish."""
    for _ in range(1200):
        if not _holding():
            return
        await asyncio.sleep(0.05)


def _holding() -> bool:
    hold = os.getenv("HOLD_FILE")
    return bool(hold) and os.path.exists(str(hold))


@function_tool(needs_approval=True)
async def transfer(ctx: ToolContext[RequestContext], amount: int, to: str) -> str:
    """Transfer money (a side effect a person approves)."""
    record_effect("transfer", ctx.tool_call_id, amount=amount, to=to)
    await held()
    return f"transferred {amount} to {to}"


@function_tool(needs_approval=True)
async def refund(ctx: ToolContext[RequestContext], amount: int, to: str) -> str:
    """Refund a customer (a side effect a person approves)."""
    record_effect("refund", ctx.tool_call_id, amount=amount, to=to)
    return f"refunded {amount} to {to}"


@input_guardrail(name=NO_SECRETS, run_in_parallel=False)
def no_secrets(
    ctx: RunContextWrapper[RequestContext], agent: Agent[Any], text: Any
) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered="password" in str(text))


def front_desk() -> Agent[Any]:
    """`front` hands payments off to `payments` (a `handoff()` object), asks `clerk` (an
    agent used as a tool) for refunds, refuses messages with a password in them, and can
    hand off to `helper`, whose computer tool is marked `retry_safe`."""
    return _desk(computer_retry_safe=True)


def front_desk_with_a_bare_computer() -> Agent[Any]:
    """The same desk, its computer tool not marked: the bot cannot run it at most once."""
    return _desk(computer_retry_safe=False)


def _desk(*, computer_retry_safe: bool) -> Agent[Any]:
    payments = Agent(name="payments", instructions="payments: move money.", tools=[transfer])
    clerk = Agent(name="clerk", instructions="clerk: refund customers.", tools=[refund])
    screen: ComputerTool[Any] = ComputerTool(computer=object())
    helper = Agent(
        name="helper",
        instructions="helper: use the screen.",
        tools=[retry_safe(screen) if computer_retry_safe else screen],
    )
    return Agent(
        name="front",
        instructions="front: route the request.",
        handoffs=[handoff(payments), handoff(helper)],
        tools=[clerk.as_tool("ask_clerk", "Ask the clerk to refund a customer.")],
        input_guardrails=[no_secrets],
    )


async def _at_the_service(ctx: ToolContext[RequestContext], what: str) -> dict[str, Any]:
    """Apply `what` at the keyed service with the call's key; `what` names the call (team,
    thread, call id) so that a test can tell whose key is whose."""
    key = ctx.context.idempotency_key(ctx.tool_call_id)
    where = f"{ctx.context.team}/{ctx.context.thread_ts}/{ctx.tool_call_id}"
    result = await asyncio.to_thread(call, os.environ["KEYED_SERVICE_URL"], key, f"{where} {what}")
    await held()
    return result


@function_tool
async def charge(ctx: ToolContext[RequestContext], amount: int) -> str:
    """Charge the customer (the service applies each idempotency key once)."""
    result = await _at_the_service(ctx, f"charge {amount}")
    return f"charged {amount}: {result['id']}"


@function_tool
async def book(ctx: ToolContext[RequestContext], seats: int) -> str:
    """Book seats (the same service, but the tool is not declared keyed)."""
    result = await _at_the_service(ctx, f"book {seats}")
    return f"booked {seats}: {result['id']}"


def shop() -> Agent[Any]:
    """`charge` is declared keyed (`idempotent`), `book` is not; neither needs a person."""
    return Agent(name="shop", instructions="shop: sell.", tools=[idempotent(charge), book])
