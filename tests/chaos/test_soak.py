"""A short chaos soak (`python -m bench.chaos`) over both backends: real bot processes, the
Slack stand-in, the scripted model server and the storage emulators, with process, storage,
Slack and model faults. The harness must run cleanly; the bot must break no invariant.
The long soak (`./dev chaos --runs 500`) is run by hand and its figures are in
docs/testing.md; CHAOS_RUNS (runs per backend, 2 by default: about a minute of the suite's
ten) and CHAOS_SEED change this short one."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from testkit.services import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
RUNS = int(os.getenv("CHAOS_RUNS", "2"))
SEED = int(os.getenv("CHAOS_SEED", "1000"))


@pytest.fixture(scope="module")
def soak(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("chaos")
    command = [sys.executable, "-m", "bench.chaos", "--runs", str(RUNS), "--backend", "both"]
    command += ["--seed", str(SEED), "--out", str(out)]
    done = subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=840,
    )
    print(done.stdout[-20_000:])
    summaries = list(out.glob("*/summary.json"))
    assert done.returncode in (0, 1), done.stdout[-5000:] + done.stderr[-5000:]
    assert len(summaries) == 1, done.stderr[-5000:]
    return {"returncode": done.returncode, **json.loads(summaries[0].read_text())}


def test_the_soak_runs_cleanly(soak: dict[str, Any]) -> None:
    runs = soak["runs"]
    assert [r["backend"] for r in runs].count("local") == RUNS
    assert [r["backend"] for r in runs].count("aws") == RUNS
    assert not [r for r in runs if r["error"]]
    assert all(Path(r["history"]).stat().st_size > 0 for r in runs)


def test_no_invariant_is_violated(soak: dict[str, Any]) -> None:
    found = [
        f"seed {r['seed']} {r['backend']} {v['kind']}: {v['detail']}"
        for r in soak["runs"]
        for v in r["violations"]
    ]
    assert not found, "\n".join(found)
    assert all(r["quiet"] for r in soak["runs"])


def test_a_signalled_soak_ends_after_its_run_with_its_table_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    """SIGTERM in the middle of a soak: the run in progress ends, the table and summary
    cover the runs made, and none of its bot replicas outlive it (they used to, orphaned,
    when a soak was stopped before its `--until`)."""
    command = [sys.executable, "-m", "bench.chaos", "--runs", "5", "--backend", "local"]
    command += ["--seed", str(SEED), "--out", str(tmp_path)]
    soak = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert soak.stdout is not None
    lines: list[str] = []
    for line in soak.stdout:
        lines.append(line)
        if line.startswith("[chaos] local seed"):  # one run made, the next under way
            soak.send_signal(signal.SIGTERM)
            break
    try:
        rest, _ = soak.communicate(timeout=240)
    finally:
        soak.kill()
    printed = "".join(lines) + rest
    assert soak.returncode in (0, 1), printed[-5000:]
    assert "stopping after this run" in printed and "time is up after 2 runs" in printed
    [summary] = tmp_path.glob("*/summary.json")
    assert len(json.loads(summary.read_text())["runs"]) == 2
    assert _processes_using(tmp_path) == []


def _processes_using(folder: Path) -> list[int]:
    """Processes with a file open under `folder` (a replica's log, its sqlite files)."""
    found = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            if any(str(folder) in os.readlink(fd) for fd in fd_dir.iterdir()):
                found.append(int(fd_dir.parent.name))
    return found
