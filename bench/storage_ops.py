"""Storage operations one by one: requests, capacity and latency of each store call, on
both backends (the figures the capacity model in docs/scale.md multiplies), and the stored
checkpoint's bytes as a conversation grows (with and without the history window)."""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import percentile, section, table
from bench.emulators import Emulators
from bench.meter import METER, Tally
from storage import CheckpointMeta, ConversationKey, Status, Store
from storage.aws import AwsStore
from storage.codec import encode_state
from storage.local import LocalStore

META = CheckpointMeta(schema_version="1.21", agent_fingerprint="bench")
OPS = ("acquire", "read history", "commit turn", "release", "load checkpoint")


def turn_items(turn: int) -> list[str]:
    return [
        f'{{"role":"user","content":"message {turn}"}}',
        '{"type":"message","role":"assistant","content":'
        f'[{{"type":"output_text","text":"answer {turn}"}}]}}',
    ]


def run_turns(store: Store, iterations: int, state: dict[str, Any]) -> dict[str, list[float]]:
    """Plain turns on one conversation: acquire, read history, commit (items + checkpoint),
    release; and a load of the checkpoint as a resume would."""
    key = ConversationKey(team="TB", channel="CB", thread_ts=f"{time.time():.6f}")
    timings: dict[str, list[float]] = {op: [] for op in OPS}

    @contextmanager
    def timed(op: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        timings[op].append((time.perf_counter() - start) * 1000)

    version = 0
    for turn in range(iterations):
        with timed("acquire"):
            lease, _ = store.acquire(key, "bench", status=Status.RUNNING)
        with timed("read history"):
            page = store.read_items(key, 40)
        with timed("commit turn"):
            done = store.commit(
                lease,
                state=state,
                meta=META,
                expected_version=version,
                items=turn_items(turn),
                base_seq=page.next_seq,
            )
        assert done.checkpoint is not None
        version = done.checkpoint.version
        with timed("release"):
            store.release(lease, status=Status.IDLE)
        with timed("load checkpoint"):
            store.load_checkpoint(done.checkpoint)
    return timings


def count_requests(store: AwsStore, state: dict[str, Any]) -> dict[str, Tally]:
    key = ConversationKey(team="TB", channel="CR", thread_ts=f"{time.time():.6f}")
    counts: dict[str, Tally] = {}
    with METER.measure() as counts["acquire"]:
        lease, _ = store.acquire(key, "bench", status=Status.RUNNING)
    with METER.measure() as counts["read history"]:
        page = store.read_items(key, 40)
    with METER.measure() as counts["commit turn"]:
        done = store.commit(
            lease,
            state=state,
            meta=META,
            expected_version=0,
            items=turn_items(0),
            base_seq=page.next_seq,
        )
    with METER.measure() as counts["release"]:
        store.release(lease, status=Status.IDLE)
    with METER.measure() as counts["load checkpoint"]:
        assert done.checkpoint is not None
        store.load_checkpoint(done.checkpoint)
    lease, _ = store.acquire(key, "bench")
    with METER.measure() as counts["commit turn + release in one write"]:
        store.commit(
            lease,
            state=state,
            meta=META,
            expected_version=1,
            items=turn_items(1),
            base_seq=page.next_seq + 2,
            release=True,
        )
    with METER.measure() as counts["keep a message (taking the thread)"]:
        kept = store.keep(key, "ev-1", '{"user":"U","text":"hi"}', owner="bench|keep")
    assert kept.lease is not None
    store.release(kept.lease, status=Status.IDLE)
    with METER.measure() as counts["count by status (16 shards)"]:
        store.count_by_status()
    with METER.measure() as counts["list running (16 shards)"]:
        store.list_by_status(Status.RUNNING)
    return counts


async def checkpoint_sizes(
    turn_counts: tuple[int, ...], window: int | None
) -> dict[int, tuple[int, int]]:
    """Bytes of the stored (gzipped) checkpoint after the last turn of a conversation of N
    turns, each turn one tool call and an answer, with the session history unbounded or
    bounded to `window` items (what the runtime will configure)."""
    from agents import Agent, Runner, SQLiteSession, function_tool
    from agents.memory import SessionSettings
    from agents.testing import ScriptedModel, assistant_message, function_call

    @function_tool
    def lookup(topic: str) -> str:
        """Look a topic up."""
        return f"Facts about {topic}: " + "lorem ipsum dolor sit amet " * 8

    sizes: dict[int, tuple[int, int]] = {}
    for turns in turn_counts:
        model = ScriptedModel()
        agent = Agent(name="assistant", model=model, tools=[lookup])
        settings = SessionSettings(limit=window) if window else None
        session = SQLiteSession(f"bench-{turns}", session_settings=settings)
        result = None
        for turn in range(turns):
            model.extend(
                [
                    [function_call("lookup", {"topic": f"topic {turn}"}, call_id=f"c{turn}")],
                    [assistant_message(f"Here is what I found about topic {turn}. " * 3)],
                ]
            )
            result = await Runner.run(agent, f"Tell me about topic {turn}", session=session)
        assert result is not None
        document = result.to_state().to_json()
        raw = len(json.dumps(document, separators=(",", ":")).encode())
        sizes[turns] = (encode_state(document).size, raw)
    return sizes


def run_storage(emulators: Emulators, iterations: int = 200) -> dict[str, Any]:
    state = {"$schemaVersion": "1.21", "payload": "x" * 3000}
    aws = emulators.store("ops")
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalStore(Path(tmp))
        counts = count_requests(aws, state)
        results = {
            name: run_turns(store, iterations, state)
            for name, store in (("local", local), ("aws", aws))
        }
        local.close()
    aws.close()
    unbounded = asyncio.run(checkpoint_sizes((10, 100, 500), None))
    windowed = asyncio.run(checkpoint_sizes((10, 100, 500), 60))
    return {
        "counts": counts,
        "timings": results,
        "iterations": iterations,
        "sizes": {"unbounded": unbounded, "window": windowed},
    }


def report(found: dict[str, Any]) -> dict[str, Any]:
    section(
        "Storage operations: requests and capacity (aws backend)",
        "A 3 KB checkpoint (not finished: it goes to S3), two session items per turn.",
    )
    rows = [
        [
            op,
            t.dynamodb,
            t.s3,
            t.describe(),
            f"{t.read_units:.1f}",
            f"{t.write_units:.1f}",
            f"{t.index_write_units:.1f}",
        ]
        for op, t in found["counts"].items()
    ]
    print(
        table(
            ["operation", "DynamoDB", "S3", "requests", "RCU", "WCU", "index WCU"], rows, "lrrlrrr"
        )
    )
    iterations, results = found["iterations"], found["timings"]
    section(f"Storage operations: latency, ms ({iterations} turns)")
    rows = [
        [op] + [f"{percentile(results[b][op], p):.2f}" for b in ("local", "aws") for p in (50, 99)]
        for op in OPS
    ]
    print(table(["operation", "local p50", "local p99", "aws p50", "aws p99"], rows))
    for name in ("local", "aws"):
        turn_ms = [sum(results[name][op][i] for op in OPS[:4]) for i in range(iterations)]
        print(
            f"\nacquire + read + commit + release, {name}: p50 "
            f"{statistics.median(turn_ms):.2f} ms, p99 {percentile(turn_ms, 99):.2f} ms"
        )
    section(
        "Stored checkpoint bytes as a conversation grows (plain SDK run state)",
        "Each turn is one tool call and an answer; the stored object (gzip) and the compact "
        "JSON inside it; unbounded history, or the runtime's window of 60 items.",
    )
    sizes = found["sizes"]
    rows = [
        [turns, *sizes["unbounded"][turns], *sizes["window"][turns]] for turns in (10, 100, 500)
    ]
    print(table(["turns so far", "unbounded: stored", "JSON", "window 60: stored", "JSON"], rows))
    return {
        "counts": {op: dict(t.requests) for op, t in found["counts"].items()},
        "sizes": sizes,
    }
