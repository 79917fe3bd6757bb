"""`python -m tests.storage.keeping_child DATA_DIR COUNT THREADS PREFIX TOGETHER AT_ONCE`:
keeps COUNT messages (event ids PREFIX0, PREFIX1, ...) into THREADS threads through the
storage bridge, as Slack requests' keeps are made, AT_ONCE at a time, while a task ticks
every millisecond. TOGETHER (1): it says `ready` once its store is open and starts when a
line comes on its stdin (`start_together`), so that several processes keep at once however
long each took to start.
Prints as JSON how many keeps were made on the loop, the loop's longest stall after the
first few keeps, and whether the store found the disk slow. Run by the tests under strace
(a slow disk) and several at once (writers of other processes)."""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from storage import ConversationKey, StorageCalls
from storage.local import LocalStore
from storage.local.loop_time import WINDOW
from testkit.prefork import ROOT
from testkit.slow_disk import on_slow_disk

R = TypeVar("R")
MEASURING = WINDOW // 2 + 1  # keeps made on the loop while it learns that the disk is slow


def thread_key(n: int) -> ConversationKey:
    return ConversationKey(team="T1", channel="C1", thread_ts=f"1700{n:06d}.000100")


async def keep_all(
    store: LocalStore, count: int, threads: int, prefix: str, at_once: int
) -> dict[str, object]:
    calls = StorageCalls(store)
    made_here = 0
    run_here = store.run_here

    def counted(call: Callable[[], R]) -> R:
        nonlocal made_here
        result = run_here(call)
        made_here += 1
        return result

    run_together = store.run_together

    def counted_together(calls: list[Callable[[], R]]) -> list[R | Exception]:
        nonlocal made_here
        outcomes = run_together(calls)
        made_here += len(calls)
        return outcomes

    store.run_here = counted  # type: ignore[method-assign]
    store.run_together = counted_together  # type: ignore[method-assign,assignment]
    loop = asyncio.get_running_loop()
    gaps: list[tuple[float, float]] = []  # between the ticker's turns: from, to
    measured_from = float("inf")

    async def tick() -> None:
        last = loop.time()
        while True:
            await asyncio.sleep(0.001)
            now = loop.time()
            gaps.append((last, now))
            last = now

    ticker = asyncio.create_task(tick())

    async def keep(n: int) -> None:
        call = functools.partial(
            store.keep, thread_key(n % threads), f"{prefix}{n}", '{"text":"hi"}', owner=prefix
        )
        assert (await calls.urgent(call)).kept

    for first in range(0, count, at_once):
        await asyncio.gather(*(keep(n) for n in range(first, min(count, first + at_once))))
        if first < MEASURING <= first + at_once:
            measured_from = loop.time()
    ticker.cancel()
    calls.close()
    return {
        "made_here": made_here,
        "longest_stall": max((to - at for at, to in gaps if at >= measured_from), default=0.0),
        "slow": store.loop_time.slow,
    }


def start(
    data_dir: Path,
    count: int,
    *,
    threads: int | None = None,
    prefix: str = "E",
    together: bool = False,
    at_once: int = 1,
    fsync_delay_ms: int | None = None,
) -> subprocess.Popen[str]:
    """The tests' side: this module in a child process, under strace with every fsync
    delayed by `fsync_delay_ms` (a slow disk) if given."""
    argv = [sys.executable, "-m", "tests.storage.keeping_child"]
    argv += [str(data_dir), str(count), str(threads or count), prefix, str(int(together))]
    argv += [str(at_once)]
    if fsync_delay_ms is not None:
        argv = on_slow_disk(argv, fsync_delay_ms)
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        stdin=subprocess.PIPE if together else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def start_together(children: list[subprocess.Popen[str]]) -> None:
    """Once every child started `together` says it is ready, let them all go."""
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()


def result(child: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    said: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return said


def main() -> None:
    data_dir, count = Path(sys.argv[1]), int(sys.argv[2])
    threads, prefix, together = int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
    at_once = int(sys.argv[6])
    store = LocalStore(data_dir)
    try:
        if together:
            print("ready", flush=True)
            sys.stdin.readline()
        said = asyncio.run(keep_all(store, count, threads, prefix, at_once))
        print(json.dumps(said))
    finally:
        store.close()


if __name__ == "__main__":
    main()
