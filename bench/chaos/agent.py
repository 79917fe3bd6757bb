"""The agent graph the chaos soak runs in the real bot (`BOT_AGENT=bench.chaos.agent:build_agent`).

`chaos` is the agent a run starts with. Its side effects: `transfer` (needs a person's
approval) and `send_note` (no person: the runtime pauses before it and approves itself);
`charge`, keyed (`idempotent`): it applies the call's idempotency key at the keyed service
the soak runs (`CHAOS_KEYED_URL`, `testkit.keyed_service`), which applies each key once;
`pay`, the tool of an MCP stdio server (`testkit.mcp_server`, `require_approval`), which
writes its effects to `MCP_EFFECTS_FILE`. Through a `handoff()` object it hands wires to
`payments`, whose `wire` needs approval; through an agent used as a tool (`ask_clerk`) it
asks `clerk`, whose `file_claim` needs approval. `lookup` is read-only (`retry_safe`). Its
input guardrail `no_secrets` (blocking: the model is not asked) trips on a request that
names a password; `payments`' output guardrail `no_reveal` withholds an answer that says
`CLASSIFIED` (what the scripted model writes for a wire it was asked to `reveal`).

The MCP client's read timeout is `CHAOS_MCP_TIMEOUT` seconds (a `pay` to a recipient the
model marked `slow` takes the server longer, `MCP_SLOW_PAY_SECONDS`); `charge` waits
`CHAOS_KEYED_TIMEOUT` seconds for the keyed service's answer, which comes later than that
for a call the soak's service holds back.

Every effect is recorded outside every bot process, durable before the tool returns: one
JSON line per effect in the ledger file `CHAOS_LEDGER` (O_APPEND, fsynced), the keyed
service's count per key, and the MCP server's file (the recipient names the call: the
scripted model writes `bob ref call_...`). `transfer`, `wire` and `charge` take
`CHAOS_TRANSFER_DELAY` seconds, half before and half after their effect, so that a signal
can land before the effect or after it (the effect happened, the tool had not returned);
`pay` takes `MCP_PAY_SECONDS` after its effect."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunContextWrapper,
    function_tool,
    handoff,
    input_guardrail,
    output_guardrail,
)
from agents.mcp import MCPServerStdio, create_static_tool_filter
from agents.tool_context import ToolContext

from bench.chaos.model import MARKER, THREAD_CONTEXT, content_text
from bot.agent_api import RequestContext, idempotent, retry_safe
from testkit.keyed_service import call as call_keyed_service

LEDGER_ENV = "CHAOS_LEDGER"
DELAY_ENV = "CHAOS_TRANSFER_DELAY"
KEYED_ENV = "CHAOS_KEYED_URL"
MCP_TIMEOUT_ENV = "CHAOS_MCP_TIMEOUT"
KEYED_TIMEOUT_ENV = "CHAOS_KEYED_TIMEOUT"
INSTRUCTIONS = "chaos: you move money, take notes and look things up for a Slack thread."
PAYMENTS = "payments: you wire money for a Slack thread."
CLERK = "clerk: you file claims."
APPROVE_PAY: Any = {"always": {"tool_names": ["pay"]}}
GUARDRAIL = "no_secrets"
SECRET = "password"  # a request naming it trips the guardrail
OUTPUT_GUARDRAIL = "no_reveal"


def record_effect(tool: str, call_id: str, arguments: dict[str, Any]) -> None:
    """One line per executed side effect, durable before the tool returns."""
    line = {
        "tool": tool,
        "call_id": call_id,
        "arguments": arguments,
        "pid": os.getpid(),
        "time": time.time(),
    }
    fd = os.open(os.environ[LEDGER_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


async def _slow_effect(tool: str, call_id: str, arguments: dict[str, Any]) -> None:
    delay = float(os.getenv(DELAY_ENV, "0"))
    await asyncio.sleep(delay / 2)
    await asyncio.to_thread(record_effect, tool, call_id, arguments)
    await asyncio.sleep(delay / 2)


@function_tool(needs_approval=True)
async def transfer(ctx: ToolContext[Any], amount: int, to: str) -> str:
    """Transfer an amount of money to someone. A side effect: a person must approve it."""
    await _slow_effect("transfer", ctx.tool_call_id, {"amount": amount, "to": to})
    return f"ok: transferred {amount} to {to}"


@function_tool
async def send_note(ctx: ToolContext[Any], text: str) -> str:
    """Send a note to the team. A side effect that needs no person's approval."""
    await asyncio.to_thread(record_effect, "send_note", ctx.tool_call_id, {"text": text})
    return f"ok: noted {text!r}"


@function_tool
def lookup(topic: str) -> str:
    """Look a topic up (read-only)."""
    return f"facts about {topic}"


@function_tool
async def charge(ctx: ToolContext[RequestContext], amount: int) -> str:
    """Charge the customer: the service applies each idempotency key once."""
    delay = float(os.getenv(DELAY_ENV, "0"))
    key = ctx.context.idempotency_key(ctx.tool_call_id)
    await asyncio.sleep(delay / 2)
    # `what` names the call, for the soak to count the service's effects per call.
    result = await asyncio.to_thread(
        call_keyed_service,
        os.environ[KEYED_ENV],
        key,
        ctx.tool_call_id,
        timeout=float(os.getenv(KEYED_TIMEOUT_ENV, "10")),
    )
    await asyncio.sleep(delay / 2)
    return f"ok: charged {amount}: {result['id']}"


@function_tool(needs_approval=True)
async def wire(ctx: ToolContext[Any], amount: int, to: str) -> str:
    """Wire money to someone. A side effect: a person must approve it."""
    await _slow_effect("wire", ctx.tool_call_id, {"amount": amount, "to": to})
    return f"ok: wired {amount} to {to}"


@function_tool(needs_approval=True)
async def file_claim(ctx: ToolContext[Any], amount: int, to: str) -> str:
    """File a claim for someone. A side effect: a person must approve it."""
    await asyncio.to_thread(
        record_effect, "file_claim", ctx.tool_call_id, {"amount": amount, "to": to}
    )
    return f"ok: filed a claim of {amount} for {to}"


@input_guardrail(name=GUARDRAIL, run_in_parallel=False)
def no_secrets(
    ctx: RunContextWrapper[Any], agent: Agent[Any], given: Any
) -> GuardrailFunctionOutput:
    """Trips on the newest messages only (those after the last answer or call: a message of
    the history, kept by a run the guardrail did not check, must not trip every run), and
    not on the thread's earlier messages the bot gives a conversation that starts in a
    thread (what people said there, not requests)."""
    items = [given] if isinstance(given, str) else list(given)
    newest: list[str] = []
    for item in reversed(items):
        if not isinstance(item, dict):
            newest.append(str(item))
            continue
        if item.get("role") != "user" or item.get("type") not in (None, "message"):
            break
        text = content_text(item.get("content"))
        if not text.startswith(THREAD_CONTEXT):
            newest.append(text)
    return GuardrailFunctionOutput(
        output_info=None, tripwire_triggered=any(SECRET in text for text in newest)
    )


@output_guardrail(name=OUTPUT_GUARDRAIL)
def no_reveal(
    ctx: RunContextWrapper[Any], agent: Agent[Any], output: Any
) -> GuardrailFunctionOutput:
    """Withholds an answer that says what it must not (`MARKER`)."""
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered=MARKER in str(output))


def payments_server() -> MCPServerStdio:
    """`testkit.mcp_server` over stdio (a child of the bot process), configured by the bot's
    environment (`MCP_EFFECTS_FILE`, `MCP_PAY_SECONDS`); its own `charge` is left out (the
    agent's `charge` is a function tool)."""
    return MCPServerStdio(
        {
            "command": sys.executable,
            "args": ["-m", "testkit.mcp_server"],
            "env": dict(os.environ),
        },
        name="payments",
        require_approval=APPROVE_PAY,
        tool_filter=create_static_tool_filter(allowed_tool_names=["pay", "balance"]),
        client_session_timeout_seconds=float(os.getenv(MCP_TIMEOUT_ENV, "30")),
    )


def build_agent() -> Agent[Any]:
    payments = Agent(
        name="payments", instructions=PAYMENTS, tools=[wire], output_guardrails=[no_reveal]
    )
    clerk = Agent(name="clerk", instructions=CLERK, tools=[file_claim])
    return Agent(
        name="chaos",
        instructions=INSTRUCTIONS,
        tools=[
            transfer,
            send_note,
            retry_safe(lookup),
            idempotent(charge),
            clerk.as_tool("ask_clerk", "Ask the clerk to file a claim."),
        ],
        handoffs=[handoff(payments)],
        input_guardrails=[no_secrets],
        mcp_servers=[retry_safe(payments_server(), "balance")],
    )
