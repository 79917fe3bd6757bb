"""What the Web API stand-in keeps: the calls it answered, the channel's messages, and each
thread's status line. Plain data, saved as JSON by local mode (every field has a default
after the first four, so an older save still loads)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

TASK_STATES = ("pending", "in_progress", "complete", "error")


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    at: float = field(default_factory=time.time)
    team: str | None = None  # the workspace (or organisation) of an installed token
    peer: str | None = None  # the caller's address and port: one per connection


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    user: str
    thread_ts: str | None = None
    blocks: list[dict[str, Any]] | None = None
    reactions: set[str] = field(default_factory=set)
    ephemeral_to: str | None = None
    metadata: dict[str, Any] | None = None
    markdown_text: str | None = None  # chat.postMessage's alternative to `text`
    streamed: str = ""  # the Markdown a chat.*Stream wrote, in order
    tasks: list[dict[str, Any]] = field(default_factory=list)  # task_update chunks, by id
    task_at: dict[str, int] = field(default_factory=dict)  # id -> len(streamed) when first seen
    plan: str | None = None  # the last plan_update's title
    task_display_mode: str | None = None  # "timeline" or "plan"
    streaming: bool = False  # between chat.startStream and chat.stopStream
    files: list[dict[str, Any]] | None = None  # shared with it (`add_file`)

    def shown_text(self) -> str:
        """The text Slack gives back for it (conversations.replies): a streamed or Markdown
        message has no `text` of its own."""
        return self.text or self.streamed or self.markdown_text or ""


@dataclass
class StatusChange:
    """One change of a thread's status line: set by assistant.threads.setStatus, or cleared
    by a reply (`by` names the method)."""

    at: float
    status: str
    loading_messages: list[str] | None = None
    by: str = "assistant.threads.setStatus"


def json_object(value: Any) -> dict[str, Any] | None:
    """An object argument: sent as JSON text in forms, as an object in JSON bodies."""
    if value is None or value == "":
        return None
    data = json.loads(value) if isinstance(value, str) else value
    return data if isinstance(data, dict) else None


def json_list(value: Any) -> list[Any] | None:
    """A list argument (`blocks`, `chunks`, `loading_messages`), in either form; ValueError
    for anything else."""
    if value is None:
        return None
    data = json.loads(value) if isinstance(value, str) else value
    if not isinstance(data, list):
        raise ValueError(f"expected a list, got {type(data).__name__}")
    return list(data)
