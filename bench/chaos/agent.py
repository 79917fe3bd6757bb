"""The agent the chaos soak runs in the real bot (`BOT_AGENT=bench.chaos.agent:build_agent`).

`transfer` (needs a person's approval) and `send_note` (no person: the runtime pauses before
it and approves itself) are side effects: each appends one JSON line to the ledger file named
by `CHAOS_LEDGER`, opened with O_APPEND and fsynced, outside every bot process. `transfer`
takes `CHAOS_TRANSFER_DELAY` seconds, half before and half after its effect, so that a signal
can land before the effect or after it (the effect happened, the tool had not returned).
`lookup` is read-only (`retry_safe`)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from agents import Agent, function_tool
from agents.tool_context import ToolContext

from bot.runtime.guard import retry_safe

LEDGER_ENV = "CHAOS_LEDGER"
DELAY_ENV = "CHAOS_TRANSFER_DELAY"
INSTRUCTIONS = "You move money, take notes and look things up for a Slack thread. Be brief."


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


@function_tool(needs_approval=True)
async def transfer(ctx: ToolContext[Any], amount: int, to: str) -> str:
    """Transfer an amount of money to someone. A side effect: a person must approve it."""
    delay = float(os.getenv(DELAY_ENV, "0"))
    await asyncio.sleep(delay / 2)
    await asyncio.to_thread(
        record_effect, "transfer", ctx.tool_call_id, {"amount": amount, "to": to}
    )
    await asyncio.sleep(delay / 2)
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


def build_agent() -> Agent[Any]:
    return Agent(
        name="chaos",
        instructions=INSTRUCTIONS,
        tools=[transfer, send_note, retry_safe(lookup)],
    )
