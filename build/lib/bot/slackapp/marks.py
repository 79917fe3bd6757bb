"""The message metadata that marks the bot's posts (`agent_outcome`), so that a thread can
be read back: which recorded outcome (outbox id and part) a post delivers, which approval
calls a card holds, and which streamed replies were closed on purpose. A bot post without
it is a streamed reply whose process died mid-stream (see `live` and `poster`)."""

from __future__ import annotations

from typing import Any

EVENT_TYPE = "agent_outcome"
PREVIEW = "Preview"  # a streamed reply closed without being an answer (paused, cut short)
INTERRUPTED = "Interrupted"  # a dead process's streamed reply, replaced by a note


def mark(kind: str, **fields: Any) -> dict[str, Any]:
    return {"event_type": EVENT_TYPE, "event_payload": {"kind": kind, **fields}}


def payload_of(message: dict[str, Any]) -> dict[str, Any] | None:
    """The mark's payload, or None for a message without one."""
    metadata = message.get("metadata") or {}
    if metadata.get("event_type") != EVENT_TYPE:
        return None
    payload = metadata.get("event_payload")
    return payload if isinstance(payload, dict) else {}


def delivers(message: dict[str, Any], outbox_id: str, part: int) -> bool:
    """The message is marked as delivering part `part` of outbox entry `outbox_id`."""
    payload = payload_of(message) or {}
    if payload.get("id") != outbox_id:
        return False
    try:
        return int(payload.get("part", 0)) == part
    except (TypeError, ValueError):
        return False
