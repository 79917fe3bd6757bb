"""Durations written like `30s`, `15m`, `12h`, `7d` (`storage.config`)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from storage.config import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("15m", 900), ("12h", 43200), ("7d", 604800), ("45", 45), ("1.5h", 5400)],
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


# The last two: Arabic-Indic and fullwidth digits, which `\\d` and `float` take.
@pytest.mark.parametrize("text", ["", "7 days", "-1d", "0s", "d7", "1y", "\u0667d", "\uff17d"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format_duration() -> None:
    assert [format_duration(parse_duration(t)) for t in ("7d", "90m", "45s")] == [
        "7d",
        "90m",
        "45s",
    ]


@pytest.mark.parametrize(
    ("text", "seconds"), [("2w", 1_209_600), ("2H", 7200), (" 5 m ", 300), ("0.5s", 0.5)]
)
def test_weeks_any_case_and_spaces(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


def test_values_that_are_durations_already() -> None:
    assert parse_duration(timedelta(hours=2)) == timedelta(hours=2)
    assert parse_duration(90) == timedelta(seconds=90)
    assert parse_duration(1.5) == timedelta(seconds=1.5)


def test_the_message_names_the_value_and_gives_examples() -> None:
    with pytest.raises(ValueError, match=r"not a duration: 'soon' \(use e\.g\. 30s"):
        parse_duration("soon")
    with pytest.raises(ValueError, match="must be positive"):
        parse_duration("0")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(days=2), "2d"),
        (timedelta(weeks=1), "7d"),
        (timedelta(hours=36), "36h"),
        (timedelta(seconds=3600), "1h"),
        (timedelta(seconds=61), "61s"),
        (timedelta(0), "0s"),
    ],
)
def test_format_uses_the_largest_whole_unit(value: timedelta, text: str) -> None:
    assert format_duration(value) == text
