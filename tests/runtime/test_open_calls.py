"""Closing a set-aside run's history (`bot.runtime.open_calls`): which calls are unanswered,
and what the ledger says of each."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from bot.runtime.open_calls import NOT_RUN, UNKNOWN_OUTCOME, ClosedCalls, unanswered_calls
from storage import ConversationKey, ToolCallRecord, ToolCallStatus

KEY = ConversationKey(team="T1", channel="C1", thread_ts="1700000000.000100")


def call(call_id: str, name: str = "send_email") -> dict[str, str]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": "{}"}


def output(call_id: str) -> dict[str, str]:
    return {"type": "function_call_output", "call_id": call_id, "output": "done"}


def ledger(status: ToolCallStatus, output: str | None = None) -> ToolCallRecord:
    return ToolCallRecord(
        key=KEY,
        call_id="c",
        tool_name="send_email",
        arguments="{}",
        status=status,
        output=output,
        fence=1,
        started_at=datetime(2025, 1, 1, tzinfo=UTC),
    )


def test_unanswered_calls_are_the_calls_without_an_output() -> None:
    history = [
        json.dumps({"role": "user", "content": "email Ana and Bo"}),
        json.dumps(call("c1")),
        json.dumps(output("c1")),
        json.dumps(call("c2")),
        json.dumps(call("c3", "lookup")),
        json.dumps({"type": "function_call", "name": "no id"}),
        json.dumps(output("c-unknown")),
        json.dumps("a string item"),
        json.dumps([1, 2]),
    ]
    assert unanswered_calls(history) == [call("c2"), call("c3", "lookup")]
    assert unanswered_calls([]) == []
    assert unanswered_calls([json.dumps(call("c1")), json.dumps(output("c1"))]) == []


def test_each_call_is_closed_with_what_the_ledger_says() -> None:
    closed = ClosedCalls()
    closed.add(call("ran"), ledger(ToolCallStatus.COMPLETED, "sent to ana"))
    closed.add(call("started"), ledger(ToolCallStatus.STARTED))
    closed.add(call("absent", "lookup"), None)
    assert [c.call_id for c in closed.ran] == ["ran"]
    assert [c.call_id for c in closed.unknown] == ["started"]
    assert [(c.call_id, c.tool_name) for c in closed.not_run] == [("absent", "lookup")]
    assert [json.loads(item) for item in closed.items] == [
        {"type": "function_call_output", "call_id": "ran", "output": "sent to ana"},
        {"type": "function_call_output", "call_id": "started", "output": UNKNOWN_OUTCOME},
        {"type": "function_call_output", "call_id": "absent", "output": NOT_RUN},
    ]
    assert [c.call_id for c in closed.all] == ["ran", "started", "absent"]


def test_a_completed_call_without_output_is_closed_with_an_empty_one() -> None:
    closed = ClosedCalls()
    closed.add(call("ran"), ledger(ToolCallStatus.COMPLETED))
    assert json.loads(closed.items[0])["output"] == ""


def test_describe_says_one_sentence_per_kind() -> None:
    assert ClosedCalls().describe() == ""
    closed = ClosedCalls()
    closed.add(call("a"), ledger(ToolCallStatus.COMPLETED, "ok"))
    closed.add(call("b", "transfer"), ledger(ToolCallStatus.STARTED))
    closed.add(call("c", "lookup"), None)
    closed.add(call("d", "notify"), None)
    assert closed.describe() == (
        "Already done (it ran once and is not repeated): `send_email`. "
        "Started, outcome unknown (not run again; check it): `transfer` (call b). "
        "Not run: `lookup`, `notify`."
    )
    only_not_run = ClosedCalls()
    only_not_run.add(call("c", "lookup"), None)
    assert only_not_run.describe() == "Not run: `lookup`."
