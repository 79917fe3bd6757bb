"""Admission under load: 1,000 conversations at once on a real `python -m bot serve` with
`BOT_MAX_RUNS` at its default, and a slow scripted model (each call takes
`MODEL_DELAY`). Printed: the most model calls at once (never above `BOT_MAX_RUNS`), that
every conversation was answered, time to first answer (p50, p99, from the burst), the acks,
and the bot's peak memory (VmHWM) while 1,000 wait.

And the write cost of a running conversation (`writes`): conversations held mid-run by one
in-process runtime on DynamoDB Local, its heartbeat beating; the write units counted for a
window and turned into units per running conversation per hour (the lease renewals) and
per replica per hour (the heartbeat)."""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.agents import build_agent
from bench.bots import Bot, Sender, answers, bot_env, slack_standin
from bench.common import percentile, section, table, unique_key
from bench.emulators import Emulators
from bench.meter import METER
from bot.capacity import default_max_runs
from bot.runtime import ConversationRuntime, keep_beating
from bot.settings import RuntimeSettings
from storage import StorageSettings

MODEL_DELAY = 0.5  # seconds each model call takes
USERS = 50  # people sending the burst


def peak_memory_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def admission_on(storage: dict[str, str], conversations: int, logs: Path) -> dict[str, Any]:
    peak_file = logs / "peak.txt"
    async with slack_standin() as (api, api_url):
        env = bot_env(
            api_url, storage, BENCH_MODEL_DELAY=str(MODEL_DELAY), BENCH_PEAK_FILE=str(peak_file)
        )
        bot = Bot(env, logs / "admission.log")
        bot.start()
        try:
            await bot.wait_healthy()
            assert bot.process is not None
            idle_mb = peak_memory_mb(bot.process.pid)
            sender = Sender(api)
            users = [f"UB{n:04d}" for n in range(USERS)]
            sent = time.time()
            acks = await sender.burst(
                bot, [f"question {n}" for n in range(conversations)], users=users
            )

            def all_answered() -> bool:
                return len({a.thread_ts for a in answers(api)}) >= conversations

            await api.wait_for(all_answered, within=600)
            done = time.time() - sent
            first: dict[str, float] = {}
            for answer in answers(api):
                if answer.thread_ts is not None:
                    first.setdefault(answer.thread_ts, answer.at - sent)
            waits = sorted(first.values())
            memory = peak_memory_mb(bot.process.pid)
            await sender.close()
        finally:
            await bot.stop()
    return {
        "answered": len(first),
        "peak_calls": int(peak_file.read_text()) if peak_file.exists() else 0,
        "first_p50_s": percentile(waits, 50),
        "first_p99_s": percentile(waits, 99),
        "all_answered_s": done,
        "ack_p50_ms": percentile([a * 1000 for a in acks], 50),
        "ack_p99_ms": percentile([a * 1000 for a in acks], 99),
        "idle_mb": idle_mb,
        "peak_mb": memory,
    }


async def run_admission(emulators: Emulators, conversations: int = 1000) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        storage = {"BOT_STORAGE": "local", "BOT_DATA_DIR": str(logs / "data")}
        local = await admission_on(storage, conversations, logs)
    return {"conversations": conversations, "max_runs": default_max_runs(), "local": local}


def report(results: dict[str, Any]) -> dict[str, Any]:
    n, slots = results["conversations"], results["max_runs"]
    section(
        f"Admission: {n} conversations at once, `BOT_MAX_RUNS` default ({slots} here), "
        f"a model call taking {MODEL_DELAY} s (a real `python -m bot serve`, local storage)",
        f"{USERS} people send them. Time to first answer is from the burst to each "
        "conversation's answer; at most BOT_MAX_RUNS runs go at once, so the last wait about "
        f"{n}/{slots} x {MODEL_DELAY} s. Memory: the process's peak resident set (VmHWM).",
    )
    r = results["local"]
    print(
        table(
            [
                "answered",
                "most model calls at once",
                "first answer p50, s",
                "p99, s",
                "all answered, s",
                "ack p50 / p99, ms",
                "memory idle → peak, MB",
            ],
            [
                [
                    f"{r['answered']} of {n}",
                    f"{r['peak_calls']} (BOT_MAX_RUNS {slots})",
                    f"{r['first_p50_s']:.1f}",
                    f"{r['first_p99_s']:.1f}",
                    f"{r['all_answered_s']:.1f}",
                    f"{r['ack_p50_ms']:.0f} / {r['ack_p99_ms']:.0f}",
                    f"{r['idle_mb']:.0f} → {r['peak_mb']:.0f}",
                ]
            ],
        )
    )
    return results


# -- the write cost of a running conversation ------------------------------------------


async def run_writes(
    emulators: Emulators, conversations: int = 20, window: float = 20.0
) -> dict[str, Any]:
    store = emulators.store("writes")
    lease = StorageSettings.model_fields["lease_seconds"].default
    runtime = ConversationRuntime(
        store, build_agent(delay=window + 15), RuntimeSettings(max_runs=conversations)
    )
    beating = asyncio.create_task(keep_beating(runtime))
    keys = [unique_key("WU", n) for n in range(conversations)]
    for n, key in enumerate(keys):
        await runtime.intake.keep_message(
            key, event_id=uuid.uuid4().hex, user="UWRITE", text=f"question {n}", take=True
        )
    serving = [asyncio.create_task(runtime.serve(key)) for key in keys]
    await asyncio.sleep(3)  # every run is in its model call now
    with METER.measure() as tally:
        await asyncio.sleep(window)
    beating.cancel()
    for task in serving:
        task.cancel()
    await asyncio.gather(*serving, beating, return_exceptions=True)
    runtime.storage_calls.close()
    puts = tally.requests.get("dynamodb.PutItem", 0)  # the heartbeat's beats
    updates = tally.requests.get("dynamodb.UpdateItem", 0)  # the lease renewals
    per_hour = 3600 / window
    return {
        "conversations": conversations,
        "window_s": window,
        "lease_s": lease,
        "renewals_per_conversation_hour": updates / conversations * per_hour,
        "beats_per_replica_hour": puts * per_hour,
        # A beat is a small item in no index: 1 write unit; the rest are the renewals'.
        "renewal_units_per_conversation_hour": (tally.write_units + tally.index_write_units - puts)
        / conversations
        * per_hour,
        "reads_per_replica_hour": tally.requests.get("dynamodb.Query", 0) * per_hour,
        "requests": dict(tally.requests),
    }


def report_writes(results: dict[str, Any]) -> dict[str, Any]:
    n = results["conversations"]
    section(
        f"Write cost of a running conversation: {n} conversations held mid-run for "
        f"{results['window_s']:.0f} s by one replica (DynamoDB Local, BOT_LEASE_SECONDS "
        f"{results['lease_s']:.0f})",
        "A renewal rewrites the record and its status-index entry; a beat is one small item. "
        "Before the heartbeat "
        "a running conversation cost its renewals alone; the heartbeat adds one write per "
        "replica per beat, whatever it serves, and one query of the replicas' records.",
    )
    renewals = results["renewals_per_conversation_hour"]
    units = results["renewal_units_per_conversation_hour"]
    beats = results["beats_per_replica_hour"]
    print(
        table(
            [
                "",
                "writes per running conversation per hour",
                "write units (table + index)",
                "per replica per hour",
            ],
            [
                ["before (renewals only)", f"{renewals:.0f}", f"{units:.0f}", "0"],
                [
                    "after (renewals + heartbeat)",
                    f"{renewals:.0f} (+{beats / n:.0f} shared by {n})",
                    f"{units:.0f} (+{beats / n:.0f})",
                    f"{beats:.0f} beats (1 WU each) + {results['reads_per_replica_hour']:.0f} "
                    "queries",
                ],
            ],
        )
    )
    print(
        f"\nRequests in the window: {results['requests']}. The `GetItem`s are reads, not "
        "writes: each run looks for a stop asked from another replica every 0.5 s "
        "(`STOP_POLL`)."
    )
    return results
