"""What Slack says a person is viewing beside the agent's container, as the runtime keeps it
(`bot.runtime.viewing`): the current experience's `app_context` of a message and
`app_context_changed` (`context.entities`, most relevant first: a channel, a message, a
canvas, a list...), and the older assistant experience's `assistant_thread.context` (the
channel, for one assistant thread). Anything malformed is left out, never an error."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from bot.runtime import VIEWED_ITEMS, ViewedItem, Viewing

SLACK_ID = re.compile(r"[A-Z0-9]{2,32}")
SLACK_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,8}")
TYPE = re.compile(r"slack#/types/([a-z_]{1,40})")
KINDS = {"channel_id": "channel", "canvas_id": "canvas", "list_id": "list"}


def from_entities(context: Any, at: datetime) -> Viewing | None:
    """`{"entities": [...]}` (the current experience); None when it names nothing."""
    entities = context.get("entities") if isinstance(context, dict) else None
    if not isinstance(entities, list):
        return None
    items = [item for item in map(_entity, entities[: VIEWED_ITEMS * 2]) if item is not None]
    return Viewing(items=items[:VIEWED_ITEMS], at=at) if items else None


def from_assistant_thread(thread: Any, at: datetime) -> tuple[str, Viewing | None] | None:
    """`assistant_thread` of the older experience: (its thread_ts, what its person views:
    the channel they opened it beside, or None). None for a malformed one."""
    if not isinstance(thread, dict) or not _ts(thread.get("thread_ts")):
        return None
    thread_ts = str(thread["thread_ts"])
    context = thread.get("context")
    channel = context.get("channel_id") if isinstance(context, dict) else None
    if not _id(channel):
        return thread_ts, None
    viewing = Viewing(items=[ViewedItem(kind="channel", id=channel)], at=at, thread_ts=thread_ts)
    return thread_ts, viewing


def _entity(entity: Any) -> ViewedItem | None:
    if not isinstance(entity, dict):
        return None
    found = TYPE.fullmatch(str(entity.get("type", "")))
    if found is None:
        return None
    name, value = found.group(1), entity.get("value")
    try:
        if name in KINDS and _id(value):
            return ViewedItem(kind=KINDS[name], id=value)
        if name == "message_context" and isinstance(value, dict):
            ts, channel = value.get("message_ts"), value.get("channel_id")
            if _ts(ts) and _id(channel):
                return ViewedItem(kind="message", id=ts, channel=channel)
            return None
        if name == "thread_ts" and _ts(value):
            return ViewedItem(kind="thread", id=value)
        if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9._-]{1,64}", value):
            return ViewedItem(kind="other", id=value, label=name)
    except ValidationError:
        return None
    return None


def _id(value: Any) -> bool:
    return isinstance(value, str) and SLACK_ID.fullmatch(value) is not None


def _ts(value: Any) -> bool:
    return isinstance(value, str) and SLACK_TS.fullmatch(value) is not None
