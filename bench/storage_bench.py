"""Storage benchmark: requests per operation, latency, checkpoint bytes per turn.

    ./dev bench            (or: python -m bench.storage_bench [--iterations N])

`aws` runs against Amazon DynamoDB Local and moto's S3 on loopback, so latencies are
loopback figures, not AWS ones; request counts are exact (botocore's `before-send` event
fires once per HTTP request, retries included)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from storage import CheckpointMeta, ConversationKey, Status, Store
from storage.aws import AwsStore, create_resources
from storage.codec import encode_state
from storage.local import LocalStore
from testkit.services import aws_environment, dynamodb_local, moto_s3

META = CheckpointMeta(schema_version="1.21", agent_fingerprint="bench")
OPS = ("acquire", "read history", "commit turn", "release", "load checkpoint")


class RequestCounter:
    def __init__(self, store: AwsStore) -> None:
        self.counts: Counter[str] = Counter()
        for service, client in (("dynamodb", store.dynamodb), ("s3", store.s3)):
            client.meta.events.register("before-send", functools.partial(self._count, service))

    def _count(self, service: str, **_: Any) -> None:
        self.counts[service] += 1

    @contextmanager
    def measure(self) -> Iterator[Counter[str]]:
        before = self.counts.copy()
        delta: Counter[str] = Counter()
        yield delta
        delta.update(self.counts - before)


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


def count_requests(store: AwsStore, state: dict[str, Any]) -> dict[str, Counter[str]]:
    counter = RequestCounter(store)
    key = ConversationKey(team="TB", channel="CR", thread_ts=f"{time.time():.6f}")
    counts: dict[str, Counter[str]] = {}
    with counter.measure() as counts["acquire"]:
        lease, _ = store.acquire(key, "bench", status=Status.RUNNING)
    with counter.measure() as counts["read history"]:
        page = store.read_items(key, 40)
    with counter.measure() as counts["commit turn"]:
        done = store.commit(
            lease,
            state=state,
            meta=META,
            expected_version=0,
            items=turn_items(0),
            base_seq=page.next_seq,
        )
    with counter.measure() as counts["release"]:
        store.release(lease, status=Status.IDLE)
    with counter.measure() as counts["load checkpoint"]:
        assert done.checkpoint is not None
        store.load_checkpoint(done.checkpoint)
    lease, _ = store.acquire(key, "bench")
    with counter.measure() as counts["commit turn + release in one write"]:
        store.commit(
            lease,
            state=state,
            meta=META,
            expected_version=1,
            items=turn_items(1),
            base_seq=page.next_seq + 2,
            release=True,
        )
    return counts


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    state = {"$schemaVersion": "1.21", "payload": "x" * 3000}

    with ExitStack() as stack:
        dynamodb_url = stack.enter_context(dynamodb_local())
        s3_url = stack.enter_context(moto_s3())
        os.environ.update(aws_environment(dynamodb_url, s3_url))
        suffix = uuid.uuid4().hex[:8]
        create_resources(f"bench-{suffix}", f"bench-{suffix}")
        aws = AwsStore(f"bench-{suffix}", f"bench-{suffix}")
        local = LocalStore(Path(stack.enter_context(tempfile.TemporaryDirectory())))

        print("## Requests per operation (aws backend, counted via botocore events)\n")
        print("| operation | DynamoDB | S3 |")
        print("|---|---:|---:|")
        for op, counts in count_requests(aws, state).items():
            print(f"| {op} | {counts['dynamodb']} | {counts['s3']} |")

        print(f"\n## Latency per operation, ms ({args.iterations} turns; loopback emulators)\n")
        print("| operation | local p50 | local p99 | aws p50 | aws p99 |")
        print("|---|---:|---:|---:|---:|")
        results = {
            name: run_turns(store, args.iterations, state)
            for name, store in (("local", local), ("aws", aws))
        }
        for op in OPS:
            row = [
                f"{percentile(results[b][op], p):.2f}" for b in ("local", "aws") for p in (50, 99)
            ]
            print(f"| {op} | " + " | ".join(row) + " |")
        for name in ("local", "aws"):
            turn_ms = [sum(results[name][op][i] for op in OPS[:4]) for i in range(args.iterations)]
            print(
                f"\nplain turn, {name}: p50 {statistics.median(turn_ms):.2f} ms, "
                f"p99 {percentile(turn_ms, 99):.2f} ms"
            )

    print("\n## Checkpoint bytes written per turn, at the given conversation length\n")
    print("Each turn is one tool call and an answer; bytes are the stored object (gzip) and the")
    print("compact JSON inside it.\n")
    unbounded = asyncio.run(checkpoint_sizes((10, 100, 500), None))
    windowed = asyncio.run(checkpoint_sizes((10, 100, 500), 40))
    print("| turns so far | unbounded history: stored | JSON | history window 40: stored | JSON |")
    print("|---:|---:|---:|---:|---:|")
    for turns in (10, 100, 500):
        (u_gz, u_raw), (w_gz, w_raw) = unbounded[turns], windowed[turns]
        print(f"| {turns} | {u_gz} | {u_raw} | {w_gz} | {w_raw} |")


if __name__ == "__main__":
    main()
