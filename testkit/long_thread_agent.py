"""An agent for long-thread tests (`BOT_AGENT=testkit.long_thread_agent:build_agent`):
`read_log` is a read-only tool whose output is 400,000 characters, `LOG_HEAD` first and
`LOG_TAIL` last, far more than a small model window holds."""

from __future__ import annotations

from typing import Any

from agents import Agent, function_tool

from bot.runtime import retry_safe
from testkit import crash_points

LOG_HEAD = "BEGIN-OF-LOG"
LOG_TAIL = "END-OF-LOG"
LOG_CHARACTERS = 400_000


def the_log() -> str:
    line = "2026-12-06T10:00:00Z worker-7 processed a request in 12 ms\n"
    body = line * ((LOG_CHARACTERS - len(LOG_HEAD) - len(LOG_TAIL)) // len(line) + 1)
    filler = body[: LOG_CHARACTERS - len(LOG_HEAD) - len(LOG_TAIL) - 2]
    return f"{LOG_HEAD}\n{filler}\n{LOG_TAIL}"


@function_tool
def read_log() -> str:
    """Read the service's log (read-only)."""
    return the_log()


def build_agent() -> Agent[Any]:
    crash_points.install_from_env()  # a test may kill the bot at a moment of its choice
    return Agent(name="assistant", instructions="Answer briefly.", tools=[retry_safe(read_log)])
