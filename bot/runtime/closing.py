"""Keep a history valid for the model after a run is set aside: every function call that
never got an output gets one saying it was not run."""

from __future__ import annotations

import json
from typing import Any

from storage.session import dump_item

NOT_RUN = "Not run: the saved state of this run was set aside, so this call never executed."


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


def closing_outputs(calls: list[dict[str, Any]]) -> list[str]:
    return [
        dump_item({"type": "function_call_output", "call_id": call["call_id"], "output": NOT_RUN})
        for call in calls
    ]
