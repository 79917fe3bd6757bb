"""A slow disk does not stall the event loop: the embedded store's quick calls are made on
the loop only while they are quick (`LoopTime`). The disk is made slow from outside the
process: strace delays every fsync of the child that keeps the messages."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from storage.local.loop_time import LoopTime
from testkit.prefork import ROOT

FSYNC_DELAY_MS = 30
KEEPS = 25


def keep_in_child(data_dir: Path, *, fsync_delay_ms: int | None) -> dict[str, Any]:
    """Run `slow_disk_child` (under strace, each fsync delayed, when `fsync_delay_ms`)."""
    argv = [sys.executable, "-m", "tests.storage.slow_disk_child", str(data_dir), str(KEEPS)]
    if fsync_delay_ms is not None:
        strace = shutil.which("strace")
        assert strace, "strace makes the slow disk: ./dev test installs it"
        delay = f"inject=fsync,fdatasync:delay_enter={fsync_delay_ms * 1000}"
        argv = [
            strace,
            "-f",
            "--seccomp-bpf",
            "-qq",
            "-o",
            "/dev/null",
            "-e",
            "trace=fsync,fdatasync",
            "-e",
            delay,
            *argv,
        ]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_on_a_quick_disk_the_keeps_are_made_on_the_loop(tmp_path: Path) -> None:
    result = keep_in_child(tmp_path, fsync_delay_ms=None)
    assert result == {**result, "made_here": KEEPS, "slow": False, "kept": KEEPS}


def test_on_a_slow_disk_the_keeps_leave_the_loop_and_it_does_not_stall(tmp_path: Path) -> None:
    result = keep_in_child(tmp_path, fsync_delay_ms=FSYNC_DELAY_MS)
    assert result["kept"] == KEEPS  # nothing lost: the rest were kept on a worker thread
    assert result["slow"] is True
    assert result["made_here"] <= 3  # the first calls, which found the disk slow
    # Once it knew, no keep held the loop for an fsync.
    assert result["longest_stall"] < FSYNC_DELAY_MS / 2 / 1000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_calls_leave_the_loop_when_they_are_slow_on_average_not_for_one_slow_call() -> None:
    loop_time = LoopTime(limit=0.002, clock=Clock())
    for _ in range(50):
        assert loop_time.allows()
        loop_time.took(0.0004)
    loop_time.took(0.012)  # one checkpoint
    assert loop_time.allows()
    for _ in range(3):
        loop_time.took(0.030)
    assert loop_time.slow and not loop_time.allows()


def test_a_slow_disk_is_probed_once_per_period_and_one_quick_probe_brings_the_calls_back() -> None:
    clock = Clock()
    loop_time = LoopTime(limit=0.002, probe_every=5.0, clock=clock)
    for _ in range(3):
        loop_time.took(0.030)
    assert not loop_time.allows()
    clock.now += 4.9
    assert not loop_time.allows()
    clock.now += 0.2
    assert loop_time.allows()  # the probe
    assert not loop_time.allows()  # only one per period
    loop_time.took(0.025)  # still slow
    clock.now += 5.1
    assert loop_time.allows()
    loop_time.took(0.0004)  # quick again
    assert not loop_time.slow
    assert all(loop_time.allows() for _ in range(10))
