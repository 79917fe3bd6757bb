"""Keep a history valid for the model after a run is set aside (fail-closed, discard): every
function call that never got an output gets one, and what it says is what the tool ledger
says: a call that completed gets its recorded output (it ran, once), one that started and
never completed is "outcome unknown", one the ledger never saw was not run."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from bot.runtime.outcomes import PendingCall
from storage import ToolCallRecord, ToolCallStatus
from storage.session import dump_item

NOT_RUN = "Not run: the saved state of this run was set aside, so this call never executed."
STOPPED_BEFORE_IT_RAN = "Not run: the run was stopped on request before this call started."
UNKNOWN_OUTCOME = (
    "The outcome of this call is unknown: it was started, then the bot restarted before it "
    "recorded a result. It was not run again. Tell the user, and do not assume it succeeded."
)


def unanswered_calls(history: list[str]) -> list[dict[str, Any]]:
    """The function_call items in `history` (stored JSON text) that have no output."""
    calls: list[dict[str, Any]] = []
    answered: set[str] = set()
    for text in history:
        item = json.loads(text)
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call" and item.get("call_id"):
            calls.append(item)
        elif item.get("type") == "function_call_output":
            answered.add(item.get("call_id", ""))
    return [call for call in calls if call["call_id"] not in answered]


@dataclass
class ClosedCalls:
    """The outputs that close a history's open calls, and what the ledger said of each."""

    items: list[str] = field(default_factory=list)
    ran: list[PendingCall] = field(default_factory=list)
    unknown: list[PendingCall] = field(default_factory=list)
    not_run: list[PendingCall] = field(default_factory=list)
    stopped: list[PendingCall] = field(default_factory=list)  # armed, never started

    def add(self, call: dict[str, Any], record: ToolCallRecord | None) -> None:
        pending = PendingCall(
            call_id=call["call_id"],
            tool_name=call.get("name", ""),
            arguments=call.get("arguments", ""),
        )
        if record is not None and record.status is ToolCallStatus.COMPLETED:
            output, bucket = record.output or "", self.ran
        elif record is not None and record.status is ToolCallStatus.CANCELLED:
            output, bucket = STOPPED_BEFORE_IT_RAN, self.stopped
        elif record is not None:
            output, bucket = UNKNOWN_OUTCOME, self.unknown
        else:
            output, bucket = NOT_RUN, self.not_run
        bucket.append(pending)
        self.items.append(
            dump_item(
                {"type": "function_call_output", "call_id": pending.call_id, "output": output}
            )
        )

    def add_nested(self, call: PendingCall, record: ToolCallRecord | None) -> None:
        """A call inside a nested run (an agent used as a tool): told as the ledger says,
        with no output of its own in the history (the call that ran the nested agent gets
        one)."""
        if record is not None and record.status is ToolCallStatus.COMPLETED:
            self.ran.append(call)
        elif record is not None and record.status is ToolCallStatus.CANCELLED:
            self.stopped.append(call)
        elif record is not None:
            self.unknown.append(call)
        else:
            self.not_run.append(call)

    @property
    def all(self) -> list[PendingCall]:
        return self.ran + self.unknown + self.not_run + self.stopped

    def describe(self) -> str:
        """One sentence per kind, consistent with the ledger."""
        parts = []
        if self.ran:
            parts.append(f"Already done (it ran once and is not repeated): {_names(self.ran)}.")
        if self.unknown:
            calls = ", ".join(f"`{c.tool_name}` (call {c.call_id})" for c in self.unknown)
            parts.append(f"Started, outcome unknown (not run again; check it): {calls}.")
        if self.not_run:
            parts.append(f"Not run: {_names(self.not_run)}.")
        if self.stopped:
            parts.append(f"Stopped before it ran (not run): {_names(self.stopped)}.")
        return " ".join(parts)


def _names(calls: list[PendingCall]) -> str:
    return ", ".join(f"`{call.tool_name}`" for call in calls)
