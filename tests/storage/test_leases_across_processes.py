"""Exclusion and fencing proven with real processes, not reasoning."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from storage import Store
from tests.conftest import Backend
from tests.storage.conftest import KEY

pytestmark = pytest.mark.slow


def _spawn(
    env: dict[str, str], *args: str, stdin: int | None = None, stdout: int | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "testkit.procs", *args],
        env=env,
        text=True,
        stdin=stdin,
        stdout=stdout,
    )


def test_one_event_id_from_four_processes_is_claimed_once(
    backend: Backend, child_env: Callable[..., dict[str, str]], tmp_path: Path
) -> None:
    out = tmp_path / "claims.txt"
    for round_ in range(3):
        procs = [_spawn(child_env(), "claim_event", f"Ev-{round_}", str(out)) for _ in range(4)]
        assert [p.wait(60) for p in procs] == [0] * 4
    lines = out.read_text().split()
    wins = [lines[i + 1] for i in range(0, len(lines), 2)]
    assert len(wins) == 12
    assert wins.count("True") == 3


def test_contending_processes_never_overlap(
    backend: Backend, child_env: Callable[..., dict[str, str]], tmp_path: Path, store: Store
) -> None:
    log = tmp_path / "holders.log"
    env = child_env(BOT_LEASE_SECONDS="5")
    procs = [_spawn(env, "contend", str(KEY), f"w{i}", str(log), "6") for i in range(4)]
    assert [p.wait(120) for p in procs] == [0] * 4
    events = [line.split() for line in log.read_text().splitlines()]
    holders = {line[1] for line in events}
    assert len(holders) >= 2, "contention never happened"
    # The independent log: enter/exit strictly alternate, each exit matching its enter.
    sorted_events = sorted(events, key=lambda e: float(e[3]))
    for enter, leave in zip(sorted_events[::2], sorted_events[1::2], strict=True):
        assert enter[0] == "enter" and leave[0] == "exit"
        assert enter[1:3] == leave[1:3]
    fences = [int(e[2]) for e in sorted_events[::2]]
    assert fences == sorted(fences) and len(set(fences)) == len(fences)
    # Every holder's fenced write landed, in fence order.
    written = [json.loads(t)["f"] for t in store.read_items(KEY).items]
    assert written == fences


def test_a_frozen_holder_woken_after_takeover_lands_nothing(
    backend: Backend, child_env: Callable[..., dict[str, str]], tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    holder = _spawn(
        child_env(BOT_LEASE_SECONDS="1", BOT_LEASE_SKEW_SECONDS="0.2"),
        "frozen_holder",
        str(KEY),
        str(ready),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() or not ready.read_text():
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.05)
        holder.send_signal(signal.SIGSTOP)
        time.sleep(1.5)  # past lease + skew
        successor = backend.open(lease_seconds=30, lease_skew_seconds=0.2)
        lease, _ = successor.acquire(KEY, "successor")
        assert lease.fence == int(ready.read_text()) + 1
        holder.send_signal(signal.SIGCONT)
        out, _ = holder.communicate("go\n", timeout=60)
    finally:
        holder.kill()
    assert out.split("\n")[:-1] == [
        "append rejected",
        "commit rejected",
        "tool rejected",
        "renew rejected",
        "release rejected",
    ]
    record = successor.get(KEY)
    assert record is not None
    assert (record.lease_owner, record.fence, record.checkpoint) == ("successor", lease.fence, None)
    assert successor.read_items(KEY).items == []
    assert successor.get_tool_call(KEY, "call-frozen") is None
