"""A short chaos soak (`python -m bench.chaos`) over both backends: real bot processes, the
Slack stand-in, the scripted model server and the storage emulators, with process, storage,
Slack and model faults. The harness must run cleanly; the bot must break no invariant.
The long soak (`./dev chaos --runs 500`) is run by hand and its figures are in
docs/testing.md; CHAOS_RUNS (runs per backend, 2 by default: about a minute of the suite's
ten) and CHAOS_SEED change this short one."""

from __future__ import annotations

import json
import os
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
