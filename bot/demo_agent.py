"""The built-in assistant: one read-only tool and one side-effecting tool that needs approval."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import string
import unicodedata
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agents import Agent, RunContextWrapper, function_tool
from agents.tool_context import ToolContext

from bot.agent_api import RequestContext, retry_safe

INSTRUCTIONS = """You are a helpful assistant in a Slack thread. Be brief.
You can look up the current time in a city, and you can file a ticket for the team; filing a
ticket needs a person's approval, which the bot asks for. Use the tools when they help."""


# A few common cities and their IANA time zones; anything else gets UTC, said plainly.
CITY_ZONES = {
    "amsterdam": "Europe/Amsterdam",
    "athens": "Europe/Athens",
    "auckland": "Pacific/Auckland",
    "bangalore": "Asia/Kolkata",
    "bangkok": "Asia/Bangkok",
    "barcelona": "Europe/Madrid",
    "beijing": "Asia/Shanghai",
    "berlin": "Europe/Berlin",
    "bogota": "America/Bogota",
    "boston": "America/New_York",
    "brussels": "Europe/Brussels",
    "buenos aires": "America/Argentina/Buenos_Aires",
    "cairo": "Africa/Cairo",
    "cape town": "Africa/Johannesburg",
    "chicago": "America/Chicago",
    "copenhagen": "Europe/Copenhagen",
    "delhi": "Asia/Kolkata",
    "denver": "America/Denver",
    "dubai": "Asia/Dubai",
    "dublin": "Europe/Dublin",
    "helsinki": "Europe/Helsinki",
    "hong kong": "Asia/Hong_Kong",
    "honolulu": "Pacific/Honolulu",
    "istanbul": "Europe/Istanbul",
    "jakarta": "Asia/Jakarta",
    "johannesburg": "Africa/Johannesburg",
    "lagos": "Africa/Lagos",
    "lima": "America/Lima",
    "lisbon": "Europe/Lisbon",
    "london": "Europe/London",
    "los angeles": "America/Los_Angeles",
    "madrid": "Europe/Madrid",
    "melbourne": "Australia/Melbourne",
    "mexico city": "America/Mexico_City",
    "montreal": "America/Toronto",
    "moscow": "Europe/Moscow",
    "mumbai": "Asia/Kolkata",
    "nairobi": "Africa/Nairobi",
    "new york": "America/New_York",
    "oslo": "Europe/Oslo",
    "paris": "Europe/Paris",
    "prague": "Europe/Prague",
    "reykjavik": "Atlantic/Reykjavik",
    "rome": "Europe/Rome",
    "san francisco": "America/Los_Angeles",
    "santiago": "America/Santiago",
    "sao paulo": "America/Sao_Paulo",
    "seattle": "America/Los_Angeles",
    "seoul": "Asia/Seoul",
    "shanghai": "Asia/Shanghai",
    "singapore": "Asia/Singapore",
    "stockholm": "Europe/Stockholm",
    "sydney": "Australia/Sydney",
    "tokyo": "Asia/Tokyo",
    "toronto": "America/Toronto",
    "vancouver": "America/Vancouver",
    "vienna": "Europe/Vienna",
    "warsaw": "Europe/Warsaw",
    "zurich": "Europe/Zurich",
}
UTC_NAMES = {"", "utc", "gmt", "z", "zulu"}


def city_key(city: str) -> str:
    """`São Paulo!` -> `sao paulo`: lower case, accents and punctuation dropped."""
    plain = unicodedata.normalize("NFKD", city).encode("ascii", "ignore").decode()
    return " ".join(re.sub(r"[^a-z ]+", " ", plain.lower()).split())


def time_in(city: str, now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.UTC)
    key = city_key(city)
    city = string.capwords(city.strip()) if city.islower() else city.strip()
    utc = now.astimezone(dt.UTC).strftime("%H:%M UTC")
    if key in UTC_NAMES:
        return f"It is {utc}."
    zone_name = CITY_ZONES.get(key)
    try:
        zone = ZoneInfo(zone_name) if zone_name else None
    except ZoneInfoNotFoundError:  # no time zone database on this machine
        zone = None
    if zone is None:
        return (
            f"I only know UTC, not {city}'s time zone: it is {utc}. (The demo clock knows "
            "a few dozen large cities, such as London, New York or Tokyo.)"
        )
    local = now.astimezone(zone)
    offset = local.strftime("%z")
    return (
        f"It is {local:%H:%M} in {city} ({local:%A}; {zone_name}, "
        f"UTC{offset[:3]}:{offset[3:]}); {utc}."
    )


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
        tools=[retry_safe(current_time), retry_safe(who_is_asking), file_ticket],
    )
