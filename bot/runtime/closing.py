"""Keep a history valid for the model after a run is set aside: every function call that
never got an output gets one saying it was not run."""

from __future__ import annotations

import json

from storage.session import dump_item

NOT_RUN = "Not run: the saved state of this run was set aside, so this call never executed."


def closing_outputs(history: list[str]) -> list[str]:
    """Output items (stored JSON text) for the unanswered function calls in `history`."""
    calls: list[str] = []
    answered: set[str] = set()
    for text in history:
        item = json.loads(text)
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call" and item.get("call_id"):
            calls.append(item["call_id"])
        elif item.get("type") == "function_call_output":
            answered.add(item.get("call_id", ""))
    return [
        dump_item({"type": "function_call_output", "call_id": call_id, "output": NOT_RUN})
        for call_id in calls
        if call_id not in answered
    ]
