"""The demo agent's tools and the offline demo model: the clock answers the city asked (or
says plainly that it only knows UTC), tickets are readable UTF-8, and answers stream a word
at a time."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from agents import RunConfig, Runner, SQLiteSession

from bot.demo_agent import append_ticket, build_agent
from bot.demo_clock import time_in
from bot.demo_model import HELP, respond, words
from bot.runtime import run_turns

WINTER = dt.datetime(2025, 1, 15, 12, 0, tzinfo=dt.UTC)
SUMMER = dt.datetime(2025, 7, 15, 12, 0, tzinfo=dt.UTC)


def test_the_demo_clock_tells_the_time_in_the_city_asked() -> None:
    assert time_in("Oslo", WINTER).startswith("It is 13:00 in Oslo (Wednesday; Europe/Oslo")
    assert time_in("Oslo", SUMMER).startswith("It is 14:00 in Oslo")
    assert "UTC-05:00" in time_in("new york", WINTER) and "in New York" in time_in("new york")
    assert time_in("São Paulo", WINTER).startswith("It is 09:00 in São Paulo")
    assert time_in("UTC", WINTER) == "It is 12:00 UTC."
    assert time_in("Atlantis", WINTER).startswith(
        "I only know UTC, not Atlantis's time zone: it is 12:00 UTC."
    )


@pytest.mark.parametrize(
    ("text", "city"),
    [
        ("what time is it in Oslo?", "Oslo"),
        ("What time is it in São Paulo right now?", "São Paulo"),
        ("tokyo time please", "Tokyo"),
        ("what time is it in Atlantis", "Atlantis"),
        ("what time is it?", "UTC"),
    ],
)
def test_the_demo_model_asks_for_the_city_named(text: str, city: str) -> None:
    [call] = respond(SimpleNamespace(input=[{"role": "user", "content": text}]))
    assert call.name == "current_time"
    assert json.loads(call.arguments) == {"city": city}


def test_tickets_are_readable_utf8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOT_DATA_DIR", str(tmp_path))
    path = append_ticket("Kaffeemaschine kaputt ☕", "Grüße aus Zürich")
    line = path.read_text(encoding="utf-8")
    assert "Kaffeemaschine kaputt ☕" in line and "Grüße aus Zürich" in line
    assert json.loads(line) == {"title": "Kaffeemaschine kaputt ☕", "details": "Grüße aus Zürich"}


async def test_the_demo_model_streams_its_answer_a_word_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the runtime's turn driver sees (`on_text`): the answer in word-sized deltas,
    spaced out; the same answer as without streaming."""
    monkeypatch.setenv("BOT_DEMO_MODEL", "1")
    monkeypatch.setenv("BOT_DEMO_DELAY", "0")
    monkeypatch.setenv("BOT_DEMO_WORD_DELAY", "0.02")
    agent = build_agent()
    seen: list[tuple[float, str]] = []

    async def on_text(delta: str) -> None:
        seen.append((time.monotonic(), delta))

    result = await run_turns(
        agent,
        "hello there",
        session=SQLiteSession("demo"),
        run_config=RunConfig(tracing_disabled=True),
        max_turns=3,
        time_limit=30,
        on_text=on_text,
    )
    assert result.final_output == HELP
    assert "".join(delta for _, delta in seen) == HELP
    assert len(seen) == len(words(HELP)) > 20
    assert all(delta.strip() for _, delta in seen)  # a word each, never bare spaces
    assert seen[-1][0] - seen[0][0] >= 0.02 * (len(seen) - 1) * 0.9
    plain = await Runner.run(agent, "hello there")
    assert plain.final_output == HELP
    assert words("") == [""] and words(" a  b ") == [" a  ", "b "]
