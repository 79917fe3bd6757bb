"""A slow disk does not stall the event loop: the embedded store's quick calls are made on
the loop only while they are quick (`LoopTime`). The disk is made slow from outside the
process: strace delays every fsync of the child that keeps the messages
(`keeping_child`)."""

from __future__ import annotations

import functools
from pathlib import Path

from storage.local import LocalStore
from storage.local.loop_time import WINDOW, LoopTime
from tests.storage import keeping_child

FSYNC_DELAY_MS = 60
KEEPS = 25


def kept(data_dir: Path, count: int) -> int:
    store = LocalStore(data_dir)
    try:
        return sum(len(store.read_inbox(keeping_child.thread_key(n))) for n in range(count))
    finally:
        store.close()


def test_on_a_quick_disk_the_keeps_are_made_on_the_loop(tmp_path: Path) -> None:
    said = keeping_child.result(keeping_child.start(tmp_path, KEEPS))
    assert said["made_here"] == KEEPS and said["slow"] is False
    assert kept(tmp_path, KEEPS) == KEEPS


def test_on_a_slow_disk_the_keeps_leave_the_loop_and_it_does_not_stall(tmp_path: Path) -> None:
    child = keeping_child.start(tmp_path, KEEPS, fsync_delay_ms=FSYNC_DELAY_MS)
    said = keeping_child.result(child)
    assert kept(tmp_path, KEEPS) == KEEPS  # nothing lost: the rest were kept on a worker
    assert said["slow"] is True
    # Once it knew, no keep was made on the loop (how long the loop stalled meanwhile is
    # the scheduler's business on a shared machine: `bench`, not a test, says it).
    assert said["made_here"] <= keeping_child.MEASURING  # the first, which found it slow


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def slow_calls(loop_time: LoopTime, count: int) -> None:
    for _ in range(count):
        loop_time.took(0.030)


def test_calls_leave_the_loop_when_most_of_the_latest_are_slow_not_for_a_few() -> None:
    loop_time = LoopTime(limit=0.002, clock=Clock())
    for _ in range(50):
        assert loop_time.allows()
        loop_time.took(0.0004)
    slow_calls(loop_time, WINDOW // 2)  # a checkpoint, a collection, a busy scheduler
    for _ in range(WINDOW):
        loop_time.took(0.0004)
    slow_calls(loop_time, WINDOW // 2)
    assert loop_time.allows()
    loop_time.took(0.030)  # now most of the latest
    assert loop_time.slow and not loop_time.allows()


def test_a_slow_disk_is_probed_once_per_period_and_one_quick_probe_brings_the_calls_back() -> None:
    clock = Clock()
    loop_time = LoopTime(limit=0.002, probe_every=5.0, clock=clock)
    slow_calls(loop_time, WINDOW)
    assert not loop_time.allows()
    clock.now += 4.9
    assert not loop_time.allows()
    clock.now += 0.2
    assert loop_time.allows()  # the probe
    loop_time.took(0.025)  # still slow
    assert not loop_time.allows()  # one probe per period
    clock.now += 4.9
    assert not loop_time.allows()
    clock.now += 0.2
    assert loop_time.allows()
    loop_time.took(0.0004)  # quick again
    assert not loop_time.slow
    assert all(loop_time.allows() for _ in range(10))
    slow_calls(loop_time, WINDOW // 2)  # judged afresh: a few slow calls are not enough
    assert loop_time.allows()


def test_a_probe_waits_for_a_write_the_reads_before_it_run_on_the_loop() -> None:
    clock = Clock()
    loop_time = LoopTime(limit=0.002, probe_every=5.0, clock=clock)
    slow_calls(loop_time, WINDOW)
    clock.now += 5.1
    assert all(loop_time.allows() for _ in range(5))  # reads: the store does not tell them
    loop_time.took(0.030)  # the first write after them is the probe, and it is slow
    assert loop_time.slow and not loop_time.allows()


def test_only_writes_tell_the_store_how_long_the_disk_takes(tmp_path: Path) -> None:
    """A read waits for no fsync: on a slow disk it is quick, and says nothing of it."""
    store = LocalStore(tmp_path)
    try:
        store.loop_time = LoopTime(limit=-1.0)  # any write counts as slow
        key = keeping_child.thread_key(0)
        for _ in range(3 * WINDOW):
            assert store.run_here(functools.partial(store.get, key)) is None
        assert not store.loop_time.slow
        for n in range(keeping_child.MEASURING):
            keep = functools.partial(store.keep, key, f"E{n}", '{"text":"hi"}', owner="w")
            assert store.run_here(keep).kept
        assert store.loop_time.slow
    finally:
        store.close()
