"""Child-process programs for multi-process tests: `python -m testkit.procs NAME ARGS...`.
Each opens the store configured by its environment (`BOT_*`, `AWS_*`), as the bot does."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from storage import ConversationKey, LeaseBusy, LeaseLost, StorageSettings, open_store


def append_batches(key: str, worker: str, batches: str) -> None:
    store = open_store()
    for batch in range(int(batches)):
        items = [json.dumps({"w": worker, "b": batch, "i": i}) for i in range(3)]
        store.append_items(ConversationKey.parse(key), items)


def claim_event(event_id: str, out: str) -> None:
    won = open_store().claim_event(event_id)
    with open(out, "a") as handle:
        handle.write(f"{os.getpid()} {won}\n")


def contend(key: str, worker: str, log: str, seconds: str) -> None:
    """Loop: try the lease; while holding it, log enter/exit with a wall clock around a
    fenced write. The log is written with O_APPEND, independent of the store."""
    store = open_store()
    conversation = ConversationKey.parse(key)
    deadline = time.time() + float(seconds)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    while time.time() < deadline:
        try:
            lease, _ = store.acquire(conversation, worker)
        except LeaseBusy:
            time.sleep(0.01)
            continue
        os.write(fd, f"enter {worker} {lease.fence} {time.time():.6f}\n".encode())
        store.append_items(conversation, [json.dumps({"w": worker, "f": lease.fence})], lease)
        time.sleep(0.05)
        os.write(fd, f"exit {worker} {lease.fence} {time.time():.6f}\n".encode())
        store.release(lease)
        time.sleep(0.01)
    os.close(fd)


def frozen_holder(key: str, ready: str) -> None:
    """Take the lease, signal readiness, and (after being SIGSTOPped and SIGCONTed past the
    lease) try every kind of write. Prints one line per attempt: rejected or LANDED."""
    store = open_store(StorageSettings())
    conversation = ConversationKey.parse(key)
    lease, _ = store.acquire(conversation, "frozen")
    with open(ready, "w") as handle:
        handle.write(str(lease.fence))
    sys.stdin.readline()  # the test stops us here, then wakes us and sends a line
    from storage import CheckpointMeta

    attempts: dict[str, Callable[[], object]] = {
        "append": lambda: store.append_items(conversation, ['"frozen"'], lease),
        "commit": lambda: store.commit(
            lease,
            state={"frozen": True},
            meta=CheckpointMeta(schema_version="1.21", agent_fingerprint="f"),
            expected_version=0,
            items=['"frozen-commit"'],
        ),
        "tool": lambda: store.begin_tool_call(lease, "call-frozen", "t", "{}"),
        "renew": lambda: store.renew(lease),
        "release": lambda: store.release(lease),
    }
    for name, attempt in attempts.items():
        try:
            attempt()
            print(f"{name} LANDED", flush=True)
        except LeaseLost:
            print(f"{name} rejected", flush=True)


def serve_events(events_file: str, log: str, out: str) -> None:
    """Handle the given Slack-like events concurrently, as one bot replica would; the model
    logs when it works on which thread, to an O_APPEND file shared with the other replica."""
    import asyncio
    import random

    from agents.testing import ModelStep, ScriptedModel, assistant_message

    from bot.runtime import ConversationRuntime, Outcome
    from testkit.runtime import SideEffects, build_agent, last_user_text

    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    async def respond(call: Any) -> Any:
        text = last_user_text(call)
        thread = text.split("-")[0]
        os.write(fd, f"enter {thread} {time.time():.6f}\n".encode())
        await asyncio.sleep(0.05)
        os.write(fd, f"exit {thread} {time.time():.6f}\n".encode())
        return [assistant_message(f"echo: {text}")]

    events = json.loads(Path(events_file).read_text())
    random.shuffle(events)
    model = ScriptedModel([ModelStep.respond(respond) for _ in range(len(events) + 5)])
    runtime = ConversationRuntime(open_store(), build_agent(model, SideEffects(Path(log + ".fx"))))

    async def main() -> list[Outcome]:
        async def one(event: dict[str, str]) -> list[Outcome]:
            await asyncio.sleep(random.random() * 0.2)
            key = ConversationKey.parse(event["key"])
            return await runtime.handle_message(
                key, event_id=event["event_id"], user="U1", text=event["text"]
            )

        results = await asyncio.gather(*(one(e) for e in events))
        return [o for r in results for o in r]

    outcomes = asyncio.run(main())
    with open(out, "w") as handle:
        for outcome in outcomes:
            handle.write(
                json.dumps({"type": type(outcome).__name__, **outcome.model_dump(mode="json")})
                + "\n"
            )


if __name__ == "__main__":
    globals()[sys.argv[1]](*sys.argv[2:])
