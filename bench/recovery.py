"""Recovery throughput: conversations left `running` by a process that died right after
keeping their message, resumed by one replica's `recover()` (the start-up sweep), on both
backends. Each is answered (one model turn, one commit, the release)."""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.agents import build_agent
from bench.common import section, table, unique_key
from bench.emulators import Emulators
from bench.meter import METER
from bot.runtime import ConversationRuntime
from bot.settings import RuntimeSettings
from storage import Store
from storage.local import LocalStore

TARGET = 100  # conversations per second per replica


async def recovery_rate(
    store: Store, conversations: int
) -> tuple[float, int, dict[str, int], float]:
    """Conversations resumed per second (wall clock), the concurrency, the AWS requests, and
    the rate the replica's own CPU would allow (its CPU seconds, all threads; the emulators
    run in other processes on the same 2 cores)."""
    for n in range(conversations):
        store.enqueue(unique_key("CR", n), uuid.uuid4().hex, '{"user":"U","text":"question"}')
    settings = RuntimeSettings()
    runtime = ConversationRuntime(store, build_agent(), settings)
    with METER.measure() as tally:
        start, cpu = time.perf_counter(), time.process_time()
        outcomes = await runtime.recover(limit=conversations)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    answered = sum(1 for o in outcomes if type(o).__name__ == "Answer")
    runtime.io.close()
    if answered != conversations:
        raise AssertionError(f"recovered {answered} of {conversations}")
    return (
        conversations / elapsed,
        settings.recovery_concurrency,
        dict(tally.requests),
        conversations / cpu,
    )


async def run_recovery(emulators: Emulators, conversations: int = 1000) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalStore(Path(tmp))
        results["local"] = await recovery_rate(local, conversations)
        local.close()
    aws = emulators.store("recovery")
    results["aws (DynamoDB Local + moto S3)"] = await recovery_rate(aws, conversations)
    aws.close()
    return {"conversations": conversations, **results}


def report(results: dict[str, Any]) -> dict[str, Any]:
    n = results["conversations"]
    section(
        f"Recovery after a restart: {n} interrupted conversations, one replica",
        "Each conversation's message was kept and its process died before serving it; one "
        "`recover()` call (what the start-up sweep does) finds them through the status "
        "index, takes each lease and answers each (`BOT_RECOVERY_CONCURRENCY` at once).",
    )
    rows = []
    summary = {}
    for backend, value in results.items():
        if backend == "conversations":
            continue
        rate, concurrency, requests, cpu_rate = value
        per = sum(requests.values()) / n
        met = "met" if rate >= TARGET else "not met"
        listed = ", ".join(f"{k.split('.', 1)[1]} {v / n:.2f}" for k, v in sorted(requests.items()))
        rows.append(
            [
                backend,
                f"{rate:.0f}",
                f"{cpu_rate:.0f}",
                concurrency,
                f"{per:.2f} ({listed})" if requests else "0",
                f"{met} (≥ {TARGET}/s)",
            ]
        )
        summary[backend] = {"rate": rate, "cpu_rate": cpu_rate, "requests_per_conversation": per}
    print(
        table(
            [
                "backend",
                "conversations/s",
                "its own CPU allows, /s",
                "concurrency",
                "AWS requests each",
                "target",
            ],
            rows,
            "lrrrlr",
        )
    )
    return summary
