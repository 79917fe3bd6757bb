"""`bench cpu --before REV`: the earlier revision is checked out into a temporary detached
worktree that is gone afterwards, even when the run fails, and its bots differ from ours only
in their code (cwd, PYTHONPATH) and their storage."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.bots import ROOT
from bench.cpu import Before, bots, checked_out


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def worktrees() -> set[Path]:
    listed = git("worktree", "list", "--porcelain").splitlines()
    return {Path(line.removeprefix("worktree ")) for line in listed if line.startswith("worktree ")}


def test_the_revision_is_checked_out_detached_and_removed_afterwards() -> None:
    with checked_out("HEAD~1") as before:
        tree = before.tree
        assert tree in worktrees()
        assert git("rev-parse", "HEAD", cwd=tree) == git("rev-parse", "HEAD~1")
        assert git("rev-parse", "--short", "HEAD", cwd=tree) == before.rev
        on_branch = subprocess.run(["git", "symbolic-ref", "-q", "HEAD"], cwd=tree, check=False)
        assert on_branch.returncode == 1  # detached
        assert (tree / "bench" / "cpu.py").is_file()
        if (ROOT / "node_modules").exists():
            assert (tree / "node_modules").resolve() == (ROOT / "node_modules").resolve()
    assert not tree.exists()
    assert tree not in worktrees()


def test_the_worktree_is_removed_when_the_run_fails() -> None:
    with pytest.raises(RuntimeError, match="the run failed"), checked_out("HEAD") as before:
        tree = before.tree
        raise RuntimeError("the run failed")
    assert not tree.exists()
    assert tree not in worktrees()


def test_an_unknown_revision_leaves_no_worktree() -> None:
    present = worktrees()
    with pytest.raises(subprocess.CalledProcessError), checked_out("no-such-revision"):
        pass
    assert worktrees() == present


def test_the_earlier_bots_run_its_code_with_our_environment(tmp_path: Path) -> None:
    before = Before("abc1234", tmp_path / "tree")
    aws_before = {"BOT_STORAGE": "aws", "BOT_TABLE": "then", "BOT_BUCKET": "then"}
    aws_now = {"BOT_STORAGE": "aws", "BOT_TABLE": "now", "BOT_BUCKET": "now"}
    made = dict(bots("http://api", "http://model", tmp_path, aws_now, None, (before, aws_before)))
    assert list(made) == [
        "plain bot",
        "ours, local",
        "ours, aws",
        "ours @abc1234, local",
        "ours @abc1234, aws",
    ]
    own = {"BOT_STORAGE", "BOT_DATA_DIR", "BOT_TABLE", "BOT_BUCKET", "PORT", "PYTHONPATH"}
    for backend in ("local", "aws"):
        now, then = made[f"ours, {backend}"], made[f"ours @abc1234, {backend}"]
        assert (now.cwd, then.cwd) == (ROOT, before.tree)
        assert (now.env["PYTHONPATH"], then.env["PYTHONPATH"]) == (str(ROOT), str(before.tree))
        assert (now.module, now.argv) == (then.module, then.argv)
        differ = {k for k in now.env.keys() | then.env.keys() if now.env.get(k) != then.env.get(k)}
        assert differ <= own
    assert made["ours @abc1234, aws"].env["BOT_TABLE"] == "then"
    assert (
        made["ours @abc1234, local"].env["BOT_DATA_DIR"] != made["ours, local"].env["BOT_DATA_DIR"]
    )
    assert "ours @abc1234, local" not in dict(
        bots("http://api", "http://model", tmp_path, aws_now, None)
    )
