"""Crash safety, proven by killing real processes at every boundary and recovering in a new
process: the side effect runs at most once, each completed turn is in the session exactly
once, the thread finishes or gets a notice, and the user's message is never lost."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from storage import Status, Store
from testkit import prefork
from testkit.runtime import KEY, SideEffects, history, record_of

pytestmark = pytest.mark.slow

# (boundary, nth, BOT_CHECKPOINT_INTERVAL). By default the harmless lookup turn shares its
# checkpoint with the turn that chooses the email (the pause before it is sent: commit 1,
# the only one with a blob; a finished run has nothing to resume, so its small checkpoint
# lives in the record itself); with "0" every turn has its own (the pause is commit 2).
SCENARIOS = [
    ("none", 0, None),
    ("after_model_response", 1, None),
    ("after_model_response", 2, None),
    ("after_model_response", 3, None),
    ("before_side_effect", 1, None),
    ("after_side_effect", 1, None),
    ("between_blob_and_commit", 1, None),
    ("after_commit", 1, None),
    ("after_commit", 2, None),
    ("after_model_response", 1, "0"),
    ("between_blob_and_commit", 1, "0"),
    ("between_blob_and_commit", 2, "0"),
    ("after_commit", 1, "0"),
    ("after_commit", 2, "0"),
    ("after_commit", 3, "0"),
]
ARMING_COMMIT = {None: 1, "0": 2}  # the commit that approves the email (not started yet)


def _child(env: dict[str, str], *args: str) -> int:
    return prefork.run([sys.executable, "-m", "testkit.crash_child", *args], env=env, timeout=120)


@pytest.mark.parametrize(
    ("boundary", "nth", "interval"),
    SCENARIOS,
    ids=[f"{b}-{n}" + ("" if i is None else f"-interval{i}") for b, n, i in SCENARIOS],
)
def test_kill_at_boundary_then_recover(
    boundary: str,
    nth: int,
    interval: str | None,
    store: Store,
    child_env: Callable[..., dict[str, str]],
    tmp_path: Path,
    effects: SideEffects,
) -> None:
    every = {} if interval is None else {"BOT_CHECKPOINT_INTERVAL": interval}
    env = child_env(BOT_LEASE_SECONDS="1", BOT_LEASE_SKEW_SECONDS="0", **every)
    first_out, recovery_out = tmp_path / "first.jsonl", tmp_path / "recovery.jsonl"
    code = _child(env, "run", boundary, str(nth), str(effects.path), str(first_out))
    outcomes = []
    if boundary == "none":
        assert code == 0
    else:
        assert code == -9, "the child was meant to die at the boundary"
        time.sleep(1.2)  # let the dead holder's lease expire
        assert _child(env, "recover", "-", "0", str(effects.path), str(recovery_out)) == 0
        outcomes = [json.loads(line) for line in recovery_out.read_text().splitlines()]
    if first_out.exists():
        outcomes += [json.loads(line) for line in first_out.read_text().splitlines()]

    # The side effect ran at most once (counted outside every process).
    sends = effects.calls("send_email")
    assert len(sends) <= 1
    # The thread finished, and was told about the restart and any unknown outcome.
    answers = [o["text"] for o in outcomes if o["type"] == "Answer"]
    assert len(answers) == 1
    notices = [o["kind"] for o in outcomes if o["type"] == "Notice"]
    if boundary != "none":
        assert "resumed_after_restart" in notices
    unknown = "tool_outcome_unknown" in notices
    # The checkpoint that approves the call records it as approved, and it is recorded as
    # started just before it runs: dying once it started, it is never run again, and said
    # so; dying after the approving commit, before it started, it is run after the restart
    # (once), and said so.
    started = boundary in ("before_side_effect", "after_side_effect")
    assert unknown == started
    run_late = [
        o["text"]
        for o in outcomes
        if o["type"] == "Notice" and o["kind"] == "tool_completed_after_restart"
    ]
    if (boundary, nth) == ("after_commit", ARMING_COMMIT[interval]):
        [told] = run_late
        assert "`send_email`" in told and "was run once after the restart and completed" in told
    else:
        assert run_late == []
    assert answers == ["Done: email unknown."] if unknown else ["Done: email sent."]
    if not unknown:
        assert len(sends) == 1
    # Each completed turn is in the session exactly once; the user message is not lost.
    items = history(store)
    kinds = [i.get("type") or i.get("role") for i in items]
    assert kinds == [
        "user",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert items[0]["content"] == "<@U1>: email Ana"
    assert items[1]["call_id"] == items[2]["call_id"]
    assert items[3]["call_id"] == items[4]["call_id"]
    record = store.get(KEY)
    assert record is not None
    assert (record.status, record.lease_owner) == (Status.IDLE, None)
    assert store.read_inbox(KEY) == []


PAUSING = [
    (b, ARMING_COMMIT[i], i)
    for i in (None, "0")
    for b in ("after_commit", "between_blob_and_commit")
]


@pytest.mark.parametrize(
    ("boundary", "nth", "interval"),
    PAUSING,
    ids=[f"{b}-{n}" + ("" if i is None else f"-interval{i}") for b, n, i in PAUSING],
)
def test_killed_while_pausing_for_a_person(
    boundary: str,
    nth: int,
    interval: str | None,
    store: Store,
    child_env: Callable[..., dict[str, str]],
    tmp_path: Path,
    effects: SideEffects,
) -> None:
    """Killed around the commit that pauses for approval: after recovery the question is
    (re)asked, and approving it runs the tool once."""
    every = {} if interval is None else {"BOT_CHECKPOINT_INTERVAL": interval}
    env = child_env(BOT_LEASE_SECONDS="1", BOT_LEASE_SKEW_SECONDS="0", **every)
    out = tmp_path / "out.jsonl"
    assert _child(env, "run-human", boundary, str(nth), str(effects.path), str(out)) == -9
    time.sleep(1.2)
    assert _child(env, "recover-human", "-", "0", str(effects.path), str(out)) == 0
    recovered = [json.loads(line) for line in out.read_text().splitlines()]
    assert [o["type"] for o in recovered] == ["Notice", "ApprovalRequest"]
    assert recovered[1]["calls"][0]["tool_name"] == "send_email"
    assert effects.calls() == []
    assert record_of(store, KEY).status is Status.AWAITING_APPROVAL
    assert _child(env, "approve-human", "-", "0", str(effects.path), str(out)) == 0
    decided = [json.loads(line) for line in out.read_text().splitlines()]
    assert [o["type"] for o in decided] == ["Decided", "Answer"]
    assert len(effects.calls("send_email")) == 1
    kinds = [i.get("type") or i.get("role") for i in history(store)]
    assert kinds.count("function_call_output") == 2 and kinds[-1] == "message"


@pytest.mark.parametrize(
    ("boundary", "nth"), [("after_side_effect", 1), ("after_model_response", 1)]
)
def test_killed_after_a_person_approved(
    boundary: str,
    nth: int,
    store: Store,
    child_env: Callable[..., dict[str, str]],
    tmp_path: Path,
    effects: SideEffects,
) -> None:
    """The decision is durable: killed after approving (during the tool, or after the next
    model call), recovery continues the approved run instead of asking again."""
    env = child_env(BOT_LEASE_SECONDS="1", BOT_LEASE_SKEW_SECONDS="0")
    out = tmp_path / "out.jsonl"
    assert _child(env, "run-human", "none", "0", str(effects.path), str(out)) == 0
    assert _child(env, "approve-human", boundary, str(nth), str(effects.path), str(out)) == -9
    time.sleep(1.2)
    assert _child(env, "recover-human", "-", "0", str(effects.path), str(out)) == 0
    recovered = [json.loads(line) for line in out.read_text().splitlines()]
    types = [o["type"] for o in recovered]
    assert "ApprovalRequest" not in types
    assert types[-1] == "Answer"
    unknown = boundary == "after_side_effect"
    assert recovered[-1]["text"] == ("Done: email unknown." if unknown else "Done: email sent.")
    assert len(effects.calls("send_email")) == 1
    assert record_of(store, KEY).status is Status.IDLE


@pytest.mark.parametrize(
    ("first", "mode"),
    [(None, "run-guarded"), ("run-human", "stop-human")],
    ids=["guardrail", "stop"],
)
def test_killed_after_the_commit_that_ends_a_turn_before_its_notice(
    first: str | None,
    mode: str,
    store: Store,
    child_env: Callable[..., dict[str, str]],
    tmp_path: Path,
    effects: SideEffects,
) -> None:
    """A turn ended by a guardrail or by `stop`: killed right after the commit that ends it,
    before its notice is posted. The thread stays listed as running until the release
    (chaos 150012: it was written idle while still held, recovery never saw it, and the
    notice and any message kept meanwhile waited for the next message)."""
    env = child_env(BOT_LEASE_SECONDS="1", BOT_LEASE_SKEW_SECONDS="0")
    out = tmp_path / "out.jsonl"
    if first is not None:
        assert _child(env, first, "none", "0", str(effects.path), str(out)) == 0
    assert _child(env, mode, "after_commit", "1", str(effects.path), str(out)) == -9
    assert record_of(store, KEY).status is Status.RUNNING
    time.sleep(1.2)
    assert _child(env, "recover", "-", "0", str(effects.path), str(out)) == 0
    recovered = [json.loads(line) for line in out.read_text().splitlines()]
    kind = "guardrail" if mode == "run-guarded" else "stopped"
    # Its notice is owed: posted after the restart notice, as any other owed outcome.
    assert [o["kind"] for o in recovered if o["type"] == "Notice"] == [
        "resumed_after_restart",
        kind,
    ]
    assert effects.calls() == []
    record = record_of(store, KEY)
    assert (record.status, record.lease_owner) == (Status.IDLE, None)
    assert store.read_inbox(KEY) == []
