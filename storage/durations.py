"""Durations written like `30s`, `15m`, `12h`, `7d` (a bare number means seconds)."""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# ASCII digits only: `\d` (and `float`) take any script's digits.
_PATTERN = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)


def parse_duration(text: str | int | float | timedelta) -> timedelta:
    if isinstance(text, timedelta):
        return text
    if isinstance(text, int | float):
        return timedelta(seconds=text)
    match = _PATTERN.match(text)
    if not match:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 15m, 12h, 7d)")
    number, unit = match.groups()
    seconds = float(number) * _UNITS[(unit or "s").lower()]
    if seconds <= 0:
        raise ValueError(f"duration must be positive: {text!r}")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0 and seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
