"""An agent for process-level tests (`BOT_AGENT=testkit.survival_agent:build_agent`): `transfer`
is a side effect a person approves; it records each execution in `$EFFECTS_FILE` (outside
every process) and then takes `$TRANSFER_SECONDS` to finish, so a signal can land mid-tool;
`balance` is read-only. A crash point named in the environment is installed with it
(`testkit.crash_points`)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from agents import Agent, function_tool
from agents.tool_context import ToolContext

from bot.runtime import retry_safe
from testkit import crash_points
from testkit.effects_file import append_effect


@function_tool(needs_approval=True)
async def transfer(ctx: ToolContext[Any], amount: int, to: str) -> str:
    """Transfer money (a side effect)."""
    append_effect({"call_id": ctx.tool_call_id, "amount": amount, "to": to})
    await asyncio.sleep(float(os.getenv("TRANSFER_SECONDS", "0")))
    return f"transferred {amount} to {to}"


@function_tool
def balance(account: str) -> str:
    """Read an account's balance (read-only)."""
    return f"{account} has 100"


def build_agent() -> Agent[Any]:
    crash_points.install_from_env()
    return Agent(
        name="assistant",
        instructions="Move money when asked.",
        tools=[transfer, retry_safe(balance)],
    )


# What the agent's container offers (bot.suggestions): the tests check these are the ones shown.
greeting = "Hello! I move money, with your approval."
suggested_prompts = [
    ("Pay Bob", "transfer 5 to bob"),
    {"title": "Bob's balance", "message": "what is bob's balance?"},
]
