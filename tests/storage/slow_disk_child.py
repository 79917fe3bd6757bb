"""`python -m tests.storage.slow_disk_child DATA_DIR COUNT`: keeps COUNT messages (one
thread each) through the storage bridge, as a Slack request's keep is made, while a task
ticks every millisecond; prints as JSON how many keeps were made on the loop, the loop's
longest stall after the first few keeps, and whether the store found the disk slow. The
parent runs it under strace to make the disk slow (every fsync delayed)."""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from storage import ConversationKey, StorageCalls
from storage.local import LocalStore

R = TypeVar("R")
MEASURING = 3  # keeps that may still be made on the loop while it learns the disk's speed


async def keep_all(store: LocalStore, count: int) -> dict[str, object]:
    calls = StorageCalls(store)
    made_here = 0
    run_here = store.run_here

    def counted(call: Callable[[], R]) -> R:
        nonlocal made_here
        result = run_here(call)
        made_here += 1
        return result

    store.run_here = counted  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    stalls: list[float] = []

    async def tick() -> None:
        last = loop.time()
        while True:
            await asyncio.sleep(0.001)
            now = loop.time()
            stalls.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    keys = [
        ConversationKey(team="T1", channel="C1", thread_ts=f"1700{n:06d}.000100")
        for n in range(count)
    ]
    for n, key in enumerate(keys):
        keep = functools.partial(store.keep, key, f"E{n}", '{"text":"hi"}', owner="w")
        assert (await calls.urgent(keep)).kept
        if n == MEASURING - 1:
            stalls.clear()
    ticker.cancel()
    calls.close()
    inboxes = [store.read_inbox(key) for key in keys]
    return {
        "made_here": made_here,
        "longest_stall": max(stalls, default=0.0),
        "slow": store.loop_time.slow,
        "kept": sum(len(inbox) for inbox in inboxes),
    }


def main() -> None:
    data_dir, count = Path(sys.argv[1]), int(sys.argv[2])
    store = LocalStore(data_dir)
    try:
        print(json.dumps(asyncio.run(keep_all(store, count))))
    finally:
        store.close()


if __name__ == "__main__":
    main()
