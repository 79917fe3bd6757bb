"""Keep a history valid for the model after a run is set aside (fail-closed, discard): every
function call that never got an output gets one, and what it says is what the tool ledger
says: a call that completed gets its recorded output (it ran, once), one that started and
never completed is "outcome unknown", one approved and never started was not run (the
closer cancels it in the ledger: it never will), one the ledger never saw was not run."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from bot.runtime.outcomes import PendingCall
from storage import ToolCallRecord, ToolCallStatus
from storage.session import dump_item

NOT_RUN = "Not run: the saved state of this run was set aside, so this call never executed."
STOPPED_BEFORE_IT_RAN = "Not run: the run was stopped on request before this call started."
NOT_STARTED = "Not run: it was approved, but the run ended before this call started."
UNKNOWN_OUTCOME = (
    "The outcome of this call is unknown: it was started, then the bot restarted before it "
    "recorded a result. It was not run again. Tell the user, and do not assume it succeeded."
)


def unanswered_calls(history: list[str]) -> list[dict[str, Any]]:
    """The function_call items in `history` (stored JSON text) that have no output."""
    calls, answered = _calls(_items(history))
    return [call for call in calls if call["call_id"] not in answered]


def answered_calls_of_the_run(history: list[str]) -> list[dict[str, Any]]:
    """The function_call items with an output after the user's last input in `history`
    (which ends with a run in progress): the calls this run made that were answered."""
    items = _items(history)
    inputs = [n for n, item in enumerate(items) if item.get("role") == "user"]
    calls, answered = _calls(items[inputs[-1] + 1 :] if inputs else items)
    return [call for call in calls if call["call_id"] in answered]


def _items(history: list[str]) -> list[dict[str, Any]]:
    return [item for item in map(json.loads, history) if isinstance(item, dict)]


def _calls(items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[str]]:
    """The function_call items, and the ids of the calls that have an output."""
    calls = [i for i in items if i.get("type") == "function_call" and i.get("call_id")]
    answered = {i.get("call_id", "") for i in items if i.get("type") == "function_call_output"}
    return calls, answered


@dataclass
class ClosedCalls:
    """The outputs that close a history's open calls, and what the ledger said of each."""

    items: list[str] = field(default_factory=list)
    ran: list[PendingCall] = field(default_factory=list)
    unknown: list[PendingCall] = field(default_factory=list)
    not_run: list[PendingCall] = field(default_factory=list)
    stopped: list[PendingCall] = field(default_factory=list)  # armed, never started
    approved: list[PendingCall] = field(default_factory=list)  # approved, never started

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
        elif record is not None and record.status is ToolCallStatus.APPROVED:
            output, bucket = NOT_STARTED, self.approved
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
        elif record is not None and record.status is ToolCallStatus.APPROVED:
            self.approved.append(call)
        elif record is not None:
            self.unknown.append(call)
        else:
            self.not_run.append(call)

    def add_answered(self, call: dict[str, Any], record: ToolCallRecord | None) -> None:
        """A call of the run whose output is in the history already: told as the ledger
        says, with nothing to add to the history. One the ledger never saw (a retry-safe
        call, a rejected one) is not told."""
        if record is not None:
            self.add_nested(
                PendingCall(
                    call_id=call["call_id"],
                    tool_name=call.get("name", ""),
                    arguments=call.get("arguments", ""),
                ),
                record,
            )

    @property
    def all(self) -> list[PendingCall]:
        return self.ran + self.unknown + self.not_run + self.stopped + self.approved

    @property
    def undecided(self) -> list[PendingCall]:
        """The calls whose approval requests (if they have one) are still open: those the
        ledger never saw. The others were decided (approved, then run or not), and their
        cards say by whom; a notice does not overwrite that."""
        return self.not_run

    @property
    def acted(self) -> bool:
        """A call ran, or may have (started, outcome unknown)."""
        return bool(self.ran or self.unknown)

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
        if self.approved:
            parts.append(f"Approved, never started (not run): {_names(self.approved)}.")
        return " ".join(parts)


def _names(calls: list[PendingCall]) -> str:
    return ", ".join(f"`{call.tool_name}`" for call in calls)
