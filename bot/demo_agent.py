"""The built-in assistant: one read-only tool and one side-effecting tool that needs approval."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agents import Agent, RunContextWrapper, function_tool
from agents.tool_context import ToolContext

from bot.agent_api import RequestContext, retry_safe, runs_offline
from bot.demo_clock import time_in

INSTRUCTIONS = """You are a helpful assistant in a Slack thread. Be brief.
You can look up the current time in a city, and you can file a ticket for the team; filing a
ticket needs a person's approval, which the bot asks for. Use the tools when they help."""


@function_tool
def current_time(city: str) -> str:
    """The current time in a city the user names (read-only); UTC if no city is named."""
    return time_in(city)


def append_ticket(title: str, details: str, **who: str) -> Path:
    """One JSON line per ticket in BOT_DATA_DIR/tickets.jsonl, UTF-8 (people read it);
    `who` adds where it was asked and by whom."""
    path = Path(os.getenv("BOT_DATA_DIR", ".bot-data")) / "tickets.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"title": title, "details": details, **who}
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


@function_tool(needs_approval=True)
def file_ticket(ctx: ToolContext[RequestContext], title: str, details: str) -> str:
    """File a ticket for the team. Needs approval: it has a side effect."""
    # Who asked and who approved come from the run context the runtime builds, never from
    # the model's arguments.
    asked = ctx.context
    append_ticket(
        title,
        details,
        requested_by=asked.user,
        approved_by=asked.approved_by(ctx.tool_call_id) or "",
        team=asked.team,
        channel=asked.channel,
        thread_ts=asked.thread_ts,
    )
    return f"Filed ticket {title!r}."


@function_tool
def who_is_asking(ctx: RunContextWrapper[RequestContext]) -> str:
    """Who is asking and where (the Slack user, channel and thread), from the request."""
    asked = ctx.context
    return f"You are <@{asked.user}>, asking in <#{asked.channel}> (thread {asked.thread_ts})."


# What the agent's container offers whoever opens it (see `bot.suggestions`).
greeting = "Hi! I can tell the time anywhere and file tickets for the team (with approval)."
suggested_prompts = [
    ("Time in Tokyo", "What time is it in Tokyo?"),
    ("File a ticket", "File a ticket: the printer on floor 3 is jammed."),
]


def build_agent() -> Agent[Any]:
    """The OpenAI Responses model by default; the offline demo model when the bot runs
    offline (local mode without OPENAI_API_KEY, or BOT_MODEL=offline)."""
    model = None
    if runs_offline():
        from bot.demo_model import DemoModel

        model = DemoModel()
    return Agent(
        name="assistant",
        instructions=INSTRUCTIONS,
        model=model,
        tools=[retry_safe(current_time), retry_safe(who_is_asking), file_ticket],
    )
