"""Recovery throughput: conversations left `running` by a process that died right after
keeping their message, resumed by one replica's `recover()` (the start-up sweep), on both
backends. Each is answered (one model turn, one commit, the release)."""

from __future__ import annotations

import os
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


def machine_busy() -> float:
    """CPU seconds the whole machine has spent busy since boot (all cores, all processes;
    /proc/stat without idle and I/O wait)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


async def recovery_rate(
    store: Store, conversations: int
) -> tuple[float, int, dict[str, int], float, float]:
    """Conversations resumed per second (wall clock), the concurrency, the AWS requests, the
    rate the replica's own CPU would allow (its CPU seconds, all threads), and the CPU
    seconds the rest of the machine spent meanwhile (the emulators, in other processes on
    the same 2 cores)."""
    for n in range(conversations):
        store.enqueue(unique_key("CR", n), uuid.uuid4().hex, '{"user":"U","text":"question"}')
    settings = RuntimeSettings()
    runtime = ConversationRuntime(store, build_agent(), settings)
    with METER.measure() as tally:
        start, cpu, busy = time.perf_counter(), time.process_time(), machine_busy()
        outcomes = await runtime.recover(limit=conversations)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        others = machine_busy() - busy - cpu
    answered = sum(1 for o in outcomes if type(o).__name__ == "Answer")
    runtime.storage_calls.close()
    if answered != conversations:
        raise AssertionError(f"recovered {answered} of {conversations}")
    return (
        conversations / elapsed,
        settings.recovery_concurrency,
        dict(tally.requests),
        conversations / cpu,
        max(others, 0.0),
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
    cores = os.cpu_count() or 1
    for backend, value in results.items():
        if backend == "conversations":
            continue
        rate, concurrency, requests, cpu_rate, others = value
        per = sum(requests.values()) / n
        own_ms, others_ms = 1000 / cpu_rate, others * 1000 / n
        met = "met" if rate >= TARGET else "not met"
        listed = ", ".join(f"{k.split('.', 1)[1]} {v / n:.2f}" for k, v in sorted(requests.items()))
        rows.append(
            [
                backend,
                f"{rate:.0f}",
                f"{cpu_rate:.0f}",
                f"{own_ms:.1f} + {others_ms:.1f}",
                f"{cores * 1000 / (own_ms + others_ms):.0f}",
                concurrency,
                f"{per:.2f} ({listed})" if requests else "0",
                f"{met} (≥ {TARGET}/s)",
            ]
        )
        summary[backend] = {
            "rate": rate,
            "cpu_rate": cpu_rate,
            "cpu_ms": own_ms,
            "others_cpu_ms": others_ms,
            "requests_per_conversation": per,
        }
    print(
        table(
            [
                "backend",
                "conversations/s",
                "its own CPU allows, /s",
                "CPU ms each: replica + rest of the machine",
                f"the {cores} cores allow, /s",
                "concurrency",
                "AWS requests each",
                "target",
            ],
            rows,
            "lrrrrrlr",
        )
    )
    print(
        "\nThe rest of the machine is, on a quiet machine, the emulators (DynamoDB Local's JVM "
        "and moto's server) answering the replica's requests on the same cores. What the "
        "cores allow is their CPU seconds divided by both CPU costs of a conversation."
    )
    return summary
