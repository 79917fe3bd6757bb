"""What local mode's page shows of the channel, as `/ui/state` sends it to page.html: threads
and their replies, each thread's status line, streamed replies with their task steps, and
blocks with what the page needs to draw them (Markdown parsed into nodes, feedback buttons
with the one this person chose)."""

from __future__ import annotations

import itertools
import re
from typing import Any

from bot.standin.markdown import markdown
from bot.standin.records import Message, StatusChange
from bot.standin.slack_api import SlackWebApi

CHANNEL = "C0GENERAL"
PERMALINK_HOST = "local.slack.com"
ROTATION = 2.5  # seconds each loading message shows, as Slack rotates them
TASK_STATES = {
    "pending": "waiting",
    "in_progress": "running",
    "complete": "done",
    "error": "failed",
}
FEEDBACK = ("positive", "negative")  # the page draws 👍 and 👎
Chosen = dict[str, dict[str, str]]  # message ts -> action_id -> the value clicked


def permalink(ts: str, channel: str = CHANNEL) -> str:
    """The thread's link in Slack's format, which `/resume` and `/agent-admin` accept."""
    return f"https://{PERMALINK_HOST}/archives/{channel}/p{ts.replace('.', '')}"


def title(text: str, words: int = 8) -> str:
    """A thread's first words, mentions left out."""
    plain = re.sub(r"<@[A-Z0-9]+>", " ", text or "")
    parts = plain.split()
    if not parts:
        return "(no text)"
    return " ".join(parts[:words]) + ("…" if len(parts) > words else "")


def status_view(change: StatusChange | None, name: str, now: float) -> dict[str, Any] | None:
    """ "agent is thinking…" and, when the bot gave some, the loading message showing now."""
    if change is None:
        return None
    loading = change.loading_messages or []
    turn = int(max(now - change.at, 0) / ROTATION)
    return {
        "text": f"{name} {change.status}",
        "loading": loading[turn % len(loading)] if loading else None,
    }


def task_view(task: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": task["id"],
        "title": task.get("title", ""),
        "state": TASK_STATES.get(task.get("status", ""), "waiting"),
        "details": task.get("details"),
        "output": task.get("output"),
    }


def stream_view(m: Message) -> list[dict[str, Any]] | None:
    """A streamed reply as parts in order: Markdown, then the tasks that started after it
    (a timeline), and so on; a plan shows all its tasks first, under its title."""
    if not (m.streamed or m.tasks or m.streaming):
        return None
    parts: list[dict[str, Any]] = []
    if m.task_display_mode == "plan":
        if m.tasks:
            parts.append({"tasks": [task_view(t) for t in m.tasks], "plan": m.plan})
        return parts + ([{"md": markdown(m.streamed)}] if m.streamed.strip() else [])
    cut = 0
    by_offset = itertools.groupby(m.tasks, key=lambda t: m.task_at.get(t["id"], 0))
    for offset, tasks in by_offset:
        if m.streamed[cut:offset].strip():
            parts.append({"md": markdown(m.streamed[cut:offset])})
        parts.append({"tasks": [task_view(t) for t in tasks]})
        cut = max(cut, offset)
    if m.streamed[cut:].strip():
        parts.append({"md": markdown(m.streamed[cut:])})
    return parts


def feedback_view(element: dict[str, Any], chosen: dict[str, str]) -> dict[str, Any]:
    """👍/👎, each with its value, its name for screen readers, and whether it was clicked."""
    action_id = str(element.get("action_id", ""))
    buttons = []
    for which in FEEDBACK:
        button = element.get(f"{which}_button") or {}
        text = (button.get("text") or {}).get("text", which)
        value = str(button.get("value", ""))
        buttons.append(
            {
                "which": which,
                "text": text,
                "label": button.get("accessibility_label") or text,
                "value": value,
                "chosen": chosen.get(action_id) == value,
            }
        )
    return {"type": "feedback_buttons", "action_id": action_id, "buttons": buttons}


def blocks_view(
    blocks: list[dict[str, Any]] | None, chosen: dict[str, str]
) -> list[dict[str, Any]] | None:
    """The blocks as given, with Markdown parsed and feedback buttons spelled out."""
    if blocks is None:
        return None
    shown: list[dict[str, Any]] = []
    for block in blocks:
        if block.get("type") == "markdown":
            shown.append({**block, "nodes": markdown(str(block.get("text", "")))})
        elif block.get("type") == "context_actions":
            elements = [
                feedback_view(e, chosen)
                for e in block.get("elements", [])
                if e.get("type") == "feedback_buttons"
            ]
            shown.append({**block, "elements": elements})
        else:
            shown.append(block)
    return shown


def message_view(m: Message, *, bot: bool, pending: bool, chosen: dict[str, str]) -> dict[str, Any]:
    return {
        "ts": m.ts,
        "user": m.user,
        "text": m.shown_text(),  # as Slack gives it back; drawn only when nothing else is
        "markdown": markdown(m.markdown_text) if m.markdown_text else None,
        "stream": stream_view(m),
        "streaming": m.streaming,
        "blocks": blocks_view(m.blocks, chosen),
        "reactions": sorted(m.reactions),
        "files": [str(f.get("name", "")) for f in m.files or []],
        "bot": bot,
        "pending": pending,
    }


def threads_view(
    api: SlackWebApi,
    *,
    pending: set[str],
    recovering: set[str],
    chosen: Chosen,
    now: float,
    channel: str = CHANNEL,
) -> list[dict[str, Any]]:
    """The channel's threads, oldest first, each with its replies and status line."""

    def view(m: Message) -> dict[str, Any]:
        return message_view(
            m, bot=m.user == api.bot_user, pending=m.ts in pending, chosen=chosen.get(m.ts, {})
        )

    messages = sorted(
        (m for m in api.messages.values() if m.channel == channel and not m.ephemeral_to),
        key=lambda m: float(m.ts),
    )
    replies: dict[str, list[Message]] = {}
    for m in messages:
        if m.thread_ts and m.thread_ts != m.ts:
            replies.setdefault(m.thread_ts, []).append(m)
    return [
        {
            **view(m),
            "title": title(m.text),
            "link": permalink(m.ts, channel),
            "recovering": m.ts in recovering,
            "status": status_view(api.status(channel, m.ts, now), "agent", now),
            "replies": [view(r) for r in replies.get(m.ts, [])],
        }
        for m in messages
        if not m.thread_ts
    ]
