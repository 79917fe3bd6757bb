"""Fleet load test on this machine: 1, then 2, then 3 replicas (real `python -m bot serve`
processes) on the same DynamoDB Local + moto S3, fed signed events round-robin as a load
balancer would, a closed loop keeping a window of conversations unanswered. Each
conversation is one mention and its answer. Measures fleet throughput (answers per second),
ack latency under load, and how busy the machine's CPUs were (the emulators and the load
generator share them: on 2 cores the fleet is CPU-bound, not storage-bound).

    python -m bench load [--conversations N]   (per step; default 1000)"""

from __future__ import annotations

import asyncio
import itertools
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bots import Bot, Sender, bot_env, slack_standin
from bench.common import percentile, section, table
from bench.emulators import Emulators
from bot.standin.slack_api import Call


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


async def step(
    replicas: int, conversations: int, window: int, storage: dict[str, str], logs: Path
) -> dict[str, Any]:
    async with slack_standin() as (api, api_url):
        answered = 0
        progress = asyncio.Event()

        def on_call(call: Call) -> None:
            nonlocal answered
            # An answer posted whole, or streamed and finished (the echo agent has no
            # tools, so every stream it stops is an answer).
            posted = call.method == "chat.postMessage" and str(
                call.args.get("text", "")
            ).startswith("echo:")
            if posted or call.method == "chat.stopStream":
                answered += 1
                progress.set()

        api.listeners.append(on_call)
        bots = [
            Bot(bot_env(api_url, storage), logs / f"load-{replicas}-{i}.log")
            for i in range(replicas)
        ]
        for bot in bots:
            bot.start()
        for bot in bots:
            await bot.wait_healthy()
        sender = Sender(api)
        targets = itertools.cycle(bots)
        acks: list[float] = []
        in_flight: set[asyncio.Task[None]] = set()

        async def send(n: int, bot: Bot) -> None:
            _, ack = await sender.mention(bot, f"load {replicas}.{n}", user=f"U{n % 97:04d}")
            acks.append(ack * 1000)

        busy0, total0 = cpu_times()
        start = time.perf_counter()
        sent = 0
        while answered < conversations:
            while sent < conversations and sent - answered < window:
                task = asyncio.create_task(send(sent, next(targets)))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                sent += 1
            progress.clear()
            try:
                await asyncio.wait_for(progress.wait(), 60)
            except TimeoutError:
                raise RuntimeError(f"no answer for 60 s ({answered}/{conversations})") from None
        elapsed = time.perf_counter() - start
        busy1, total1 = cpu_times()
        await asyncio.gather(*in_flight)
        footprints = [bot.footprint() for bot in bots]
        await sender.close()
        for bot in bots:
            await bot.stop()
    return {
        "replicas": replicas,
        "conversations": conversations,
        "seconds": elapsed,
        "throughput": conversations / elapsed,
        "ack_p50": percentile(acks, 50),
        "ack_p99": percentile(acks, 99),
        "cpu_busy": (busy1 - busy0) / (total1 - total0),
        "rss_mb": max(f[0] for f in footprints),
        "sockets": max(f[1] for f in footprints),
    }


async def run_load(
    emulators: Emulators, conversations: int = 1000, window: int = 64, steps: int = 3
) -> list[dict[str, Any]]:
    storage = emulators.bot_storage("load")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for replicas in range(1, steps + 1):
            results.append(await step(replicas, conversations, window, storage, Path(tmp)))
    return results


def report(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    total = sum(r["conversations"] for r in results)
    section(
        f"Fleet load: {total} conversations over 1 → {len(results)} replicas (aws backend, "
        "emulators, this 2-core machine)",
        "Closed loop: at most 64 conversations unanswered at a time, events sent round-robin "
        "to the replicas. CPU busy is the whole machine (replicas, DynamoDB Local, moto and "
        "the load generator with the Slack stand-in share its 2 cores).",
    )
    base = results[0]["throughput"]
    rows = [
        [
            r["replicas"],
            r["conversations"],
            f"{r['throughput']:.1f}",
            f"{r['throughput'] / base:.2f}",
            f"{r['ack_p50']:.0f}",
            f"{r['ack_p99']:.0f}",
            f"{r['cpu_busy'] * 100:.0f}%",
            f"{r['rss_mb']:.0f}",
            r["sockets"],
        ]
        for r in results
    ]
    print(
        table(
            [
                "replicas",
                "conversations",
                "answers/s",
                "vs 1 replica",
                "ack p50 ms",
                "ack p99 ms",
                "CPU busy",
                "RSS per replica, MB",
                "sockets per replica",
            ],
            rows,
        )
    )
    return results
