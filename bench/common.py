"""What every benchmark shares: percentiles, markdown tables, keys, quiet logging."""

from __future__ import annotations

import logging
import os
import statistics
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import aiohttp

from storage import ConversationKey


async def answers_healthz(http: aiohttp.ClientSession, url: str) -> bool:
    """The bot at `url` answered `GET /healthz` with 200 (not when refused or timed out)."""
    try:
        async with http.get(f"{url}/healthz") as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """A markdown table; columns after the first are right-aligned unless `align` says."""
    align = align or "l" + "r" * (len(headers) - 1)
    marks = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(marks) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def section(title: str, text: str = "") -> None:
    print(f"\n## {title}\n", flush=True)
    if text:
        print(text + "\n", flush=True)


def emit(text: str) -> None:
    print(text, flush=True)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def fmt(value: float, digits: int = 1) -> str:
    return f"{value:.{digits}f}"


def unique_key(channel: str, n: int = 0, team: str = "TB") -> ConversationKey:
    return ConversationKey(team=team, channel=channel, thread_ts=f"{n}.{uuid.uuid4().int % 10**6}")


def quiet() -> None:
    """No tracing, no INFO chatter from the libraries while timing."""
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    logging.basicConfig(level=logging.WARNING)
    for name in ("langgraph_checkpoint_aws", "botocore", "bot", "storage", "slack_bolt"):
        logging.getLogger(name).setLevel(logging.WARNING)


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """`with stopwatch() as t: ...` then `t[0]` is the elapsed seconds."""
    box: list[float] = []
    start = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - start)
