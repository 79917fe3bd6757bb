"""Runtime benchmark: durable overhead per turn, AWS requests per turn and per side-effecting
tool call, checkpoint bytes as conversations grow, recovery throughput.

    ./dev bench runtime     (or: python -m bench.runtime_bench [--turns N] [--recover N])
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from agents import Runner, SQLiteSession
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bench.storage_bench import RequestCounter, percentile
from bot.runtime import ConversationRuntime
from bot.settings import RuntimeSettings
from storage import ConversationKey, Store
from storage.aws import AwsStore, create_resources
from storage.local import LocalStore
from testkit.runtime import SideEffects, build_agent, echo_model
from testkit.services import aws_environment, dynamodb_local, moto_s3


def key(prefix: str, n: int) -> ConversationKey:
    return ConversationKey(team="TB", channel=prefix, thread_ts=f"{n}.{uuid.uuid4().int % 10**6}")


async def bare_turns(turns: int) -> list[float]:
    """The baseline: `Runner.run` with an in-memory `SQLiteSession`, no durability."""
    agent = build_agent(echo_model(turns + 1), SideEffects(Path(os.devnull)))
    session = SQLiteSession("bench")
    timings = []
    for turn in range(turns):
        start = time.perf_counter()
        await Runner.run(agent, f"message {turn}", session=session)
        timings.append((time.perf_counter() - start) * 1000)
    return timings


async def durable_turns(store: Store, turns: int) -> list[float]:
    runtime = ConversationRuntime(
        store, build_agent(echo_model(turns + 1), SideEffects(Path(os.devnull)))
    )
    conversation = key("CT", 0)
    timings = []
    for turn in range(turns):
        start = time.perf_counter()
        await runtime.handle_message(
            conversation, event_id=uuid.uuid4().hex, user="U", text=f"m{turn}"
        )
        timings.append((time.perf_counter() - start) * 1000)
    return timings


async def requests_per_turn(store: AwsStore) -> tuple[dict[str, int], dict[str, int]]:
    counter = RequestCounter(store)
    plain = ConversationRuntime(store, build_agent(echo_model(2), SideEffects(Path(os.devnull))))
    with counter.measure() as plain_counts:
        await plain.handle_message(key("CQ", 1), event_id=uuid.uuid4().hex, user="U", text="hi")
    tool_model = ScriptedModel(
        [
            [function_call("send_email", {"to": "a@b.c", "body": "x"}, call_id="c1")],
            [assistant_message("sent")],
        ]
    )
    with_tool = ConversationRuntime(
        store, build_agent(tool_model, SideEffects(Path(os.devnull)), approval=False)
    )
    with counter.measure() as tool_counts:
        await with_tool.handle_message(
            key("CQ", 2), event_id=uuid.uuid4().hex, user="U", text="send"
        )
    return dict(plain_counts), dict(tool_counts)


async def checkpoint_bytes(store: Store, lengths: tuple[int, ...], window: int) -> dict[int, int]:
    sizes = {}
    for turns in lengths:
        settings = RuntimeSettings(history_items=window)
        runtime = ConversationRuntime(
            store, build_agent(_chatty_model(turns), SideEffects(Path(os.devnull))), settings
        )
        conversation = key("CB", turns)
        for turn in range(turns):
            await runtime.handle_message(
                conversation,
                event_id=uuid.uuid4().hex,
                user="U",
                text=f"Tell me about topic {turn}",
            )
        record = store.get(conversation)
        assert record is not None and record.checkpoint is not None
        sizes[turns] = record.checkpoint.size
    return sizes


def _chatty_model(turns: int) -> ScriptedModel:
    def respond(call: Any) -> Any:
        return [assistant_message("Here is a fairly ordinary paragraph of an answer. " * 6)]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(turns + 1)])


async def recovery_rate(store: Store, conversations: int, concurrency: int) -> float:
    for n in range(conversations):  # each as if its process died right after keeping the message
        store.enqueue(key("CR", n), uuid.uuid4().hex, '{"user":"U","text":"question"}')
    runtime = ConversationRuntime(
        store,
        build_agent(echo_model(conversations + 5), SideEffects(Path(os.devnull))),
        RuntimeSettings(recovery_concurrency=concurrency),
    )
    start = time.perf_counter()
    outcomes = await runtime.recover()
    elapsed = time.perf_counter() - start
    answered = sum(1 for o in outcomes if type(o).__name__ == "Answer")
    assert answered == conversations, (answered, conversations)
    return conversations / elapsed


def row(label: str, counts: dict[str, int]) -> None:
    print(f"| {label} | {counts.get('dynamodb', 0)} | {counts.get('s3', 0)} |")


@contextmanager
def aws_store() -> Iterator[AwsStore]:
    with ExitStack() as stack:
        dynamodb_url = stack.enter_context(dynamodb_local())
        s3_url = stack.enter_context(moto_s3())
        os.environ.update(aws_environment(dynamodb_url, s3_url))
        name = f"rbench-{uuid.uuid4().hex[:8]}"
        create_resources(name, name)
        yield AwsStore(name, name)


async def main(args: argparse.Namespace) -> None:
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    with tempfile.TemporaryDirectory() as tmp, aws_store() as aws:
        local = LocalStore(Path(tmp))
        bare = await bare_turns(args.turns)
        durable = {
            "local": await durable_turns(local, args.turns),
            "aws": await durable_turns(aws, args.turns),
        }
        print(f"## Per-turn time, ms ({args.turns} turns, scripted model, same run)\n")
        print("| path | p50 | p99 | p50 ratio to bare |")
        print("|---|---:|---:|---:|")
        base = percentile(bare, 50)
        print(
            f"| bare Runner.run + SQLiteSession | {base:.2f} | {percentile(bare, 99):.2f} | 1.0 |"
        )
        for name, timings in durable.items():
            p50 = percentile(timings, 50)
            p99 = percentile(timings, 99)
            print(f"| durable runtime, {name} | {p50:.2f} | {p99:.2f} | {p50 / base:.1f} |")

        plain, tool = await requests_per_turn(aws)
        print("\n## AWS requests (DynamoDB / S3)\n")
        print("| what | DynamoDB | S3 |")
        print("|---|---:|---:|")
        row("plain turn: message in, answer out", plain)
        extra_ddb = tool.get("dynamodb", 0) - plain.get("dynamodb", 0)
        extra_s3 = tool.get("s3", 0) - plain.get("s3", 0)
        row("turn with one side-effecting tool call", tool)
        print(f"| added by the side-effecting call | {extra_ddb} | {extra_s3} |")

        lengths = (10, 100, 500)
        sizes = await checkpoint_bytes(local, lengths, window=60)
        print(
            "\n## Checkpoint bytes per turn as the conversation grows (history window 60 items)\n"
        )
        print("| turns so far | stored checkpoint bytes (gzip) |")
        print("|---:|---:|")
        for turns in lengths:
            print(f"| {turns} | {sizes[turns]} |")

        print(f"\n## Recovery after a restart ({args.recover} interrupted conversations)\n")
        print("| backend | conversations resumed per second |")
        print("|---|---:|")
        rate_local = await recovery_rate(local, args.recover, args.concurrency)
        print(f"| local | {rate_local:.0f} |")
        rate_aws = await recovery_rate(aws, args.recover_aws, args.concurrency)
        print(f"| aws (emulators, {args.recover_aws} conversations) | {rate_aws:.0f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--recover", type=int, default=1000)
    parser.add_argument("--recover-aws", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    asyncio.run(main(parser.parse_args()))
