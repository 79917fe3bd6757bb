"""Block Kit of the App Home tab: what waits on the person (each call with the Approve and
Reject buttons of the thread's own request, and a link to the thread), their recent
conversations and where each stands, and for admins the counts of `/agent-admin status` and
the stale conversations, each with a Discard button behind a confirmation, which carries the
conversation as it was listed (`Listed`: the discard goes ahead only if nothing changed
since). Tool names and arguments come from the model: escaped (see `text`). At most Slack's
100 blocks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from slack_sdk.models.blocks import ConfirmObject

from bot.runtime import Listed, Waiting, status_name
from bot.slackapp.blocks import asked, decision_buttons, readable_arguments
from bot.slackapp.text import truncate
from storage import Conversation, ConversationKey, Status
from storage.config import format_duration

DISCARD = "home_discard"
BLOCKS_LIMIT = 100
CALLS_SHOWN = 12
ARGUMENTS_SHOWN = 600
STATES = {
    Status.IDLE: "answered",
    Status.RUNNING: "working",
    Status.AWAITING_APPROVAL: "waiting for approval",
    Status.INTERRUPTED: "interrupted (use `/resume`)",
    Status.SET_ASIDE: f"{status_name(Status.SET_ASIDE)} (send a new message to start over)",
    Status.DISCARDED: "discarded by an admin",
}
Link = Callable[[ConversationKey], str]


@dataclass
class AdminPart:
    counts: dict[Status, int]
    stale: list[Conversation] = field(default_factory=list)
    stale_after: timedelta = timedelta(days=1)  # how long idle counts as stale


def home_view(
    waiting: list[Waiting],
    recent: list[Conversation],
    link: Link,
    admin: AdminPart | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if note:
        blocks.append(_context(note))
    blocks += _waiting(waiting, link)
    blocks += _recent(recent, link)
    if admin is not None:
        blocks += _admin(admin, link)
    return {"type": "home", "blocks": blocks[:BLOCKS_LIMIT]}


def _waiting(waiting: list[Waiting], link: Link) -> list[dict[str, Any]]:
    blocks = [_header("Waiting on you")]
    shown = 0
    for item in waiting:
        for call in item.calls:
            if shown == CALLS_SHOWN:
                blocks.append(_context("More are waiting: see `/resume` in their channels."))
                return blocks
            shown += 1
            blocks += [
                _section(
                    truncate(
                        f":raised_hand: *Approval needed*: {asked(call.tool_name, call.agent)}", 300
                    )
                ),
                _section(readable_arguments(call.arguments, ARGUMENTS_SHOWN)),
                _context(
                    f"Requested by <@{item.requested_by}> in <{link(item.record.key)}|the thread>"
                    f" · waiting since {_when(item)}"
                ),
                decision_buttons(item.record.key, call.call_id, item.version),
            ]
    if not shown:
        blocks.append(_section("Nothing is waiting on you."))
    return blocks


def _recent(recent: list[Conversation], link: Link) -> list[dict[str, Any]]:
    blocks = [{"type": "divider"}, _header("Your recent conversations")]
    if not recent:
        blocks.append(_section("None yet: mention me in a thread, or write to me here."))
    for record in recent:
        blocks.append(_section(f"{_thread(record, link)} · {STATES[record.status]}"))
    return blocks


def _admin(admin: AdminPart, link: Link) -> list[dict[str, Any]]:
    counts = " · ".join(f"{status_name(status)}: {count}" for status, count in admin.counts.items())
    blocks = [
        {"type": "divider"},
        _header("Admin"),
        _section(f"*Conversations by status*\n{counts}"),
        _section(
            "*Stale* (paused, interrupted or set aside, idle longer than "
            f"{format_duration(admin.stale_after)})"
        ),
    ]
    if not admin.stale:
        blocks.append(_context("None in this workspace."))
    for record in admin.stale:
        blocks.append(
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"{_thread(record, link)} · {STATES[record.status]}",
                },
                "accessory": {
                    "type": "button",
                    "action_id": DISCARD,
                    "style": "danger",
                    "text": {"type": "plain_text", "text": "Discard"},
                    "value": Listed.of(record).model_dump_json(exclude_none=True),
                    "confirm": ConfirmObject(
                        title="Discard this conversation?",
                        text="Its saved state is set aside and what waits in it is dropped; "
                        "the thread is told. This cannot be undone.",
                        confirm="Discard",
                        deny="Cancel",
                        style="danger",
                    ).to_dict(),
                },
            }
        )
    return blocks


def _thread(record: Conversation, link: Link) -> str:
    activity = f"{record.last_activity_at:%Y-%m-%d %H:%M} UTC"
    return f"<{link(record.key)}|Thread {record.key.thread_ts}> · last activity {activity}"


def _when(item: Waiting) -> str:
    since = item.record.waiting_since or item.record.last_activity_at
    return f"{since:%Y-%m-%d %H:%M} UTC"


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": text}}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}
