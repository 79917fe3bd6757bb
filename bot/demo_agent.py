"""The built-in assistant: one read-only tool and one side-effecting tool that needs approval."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

from agents import Agent, function_tool

from bot.runtime.guard import retry_safe

INSTRUCTIONS = """You are a helpful assistant in a Slack thread. Be brief.
You can look up the current time in a city, and you can file a ticket for the team; filing a
ticket needs a person's approval, which the bot asks for. Use the tools when they help."""


@function_tool
def current_time(city: str) -> str:
    """The current UTC time, for a city the user names (read-only)."""
    now = dt.datetime.now(dt.UTC).strftime("%H:%M UTC")
    return f"It is {now} (the demo clock ignores {city}'s time zone)."


@function_tool(needs_approval=True)
def file_ticket(title: str, details: str) -> str:
    """File a ticket for the team. Needs approval: it has a side effect."""
    path = Path(os.getenv("BOT_DATA_DIR", ".bot-data")) / "tickets.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps({"title": title, "details": details}) + "\n")
    return f"Filed ticket {title!r}."


def build_agent() -> Agent[Any]:
    """The OpenAI Responses model by default; the offline demo model when BOT_DEMO_MODEL=1
    (local mode without OPENAI_API_KEY)."""
    model = None
    if os.getenv("BOT_DEMO_MODEL") == "1":
        from bot.demo_model import DemoModel

        model = DemoModel()
    return Agent(
        name="assistant",
        instructions=INSTRUCTIONS,
        model=model,
        tools=[retry_safe(current_time), file_ticket],
    )
