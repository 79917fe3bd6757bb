"""Block Kit messages: approval requests, decisions, set-aside requests, the paused list.
Tool names and arguments come from the model: they are escaped (see `text`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from bot.runtime.outcomes import ApprovalRequest, Decided, PendingCall
from bot.slackapp.text import code_block, escape, truncate
from storage import Conversation, ConversationKey

APPROVE = "approval_approve"
REJECT = "approval_reject"
RESUME = "resume_thread"
ARGUMENTS_LIMIT = 2500


def readable_arguments(arguments: str, limit: int = ARGUMENTS_LIMIT) -> str:
    try:
        rendered = json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        rendered = arguments
    return code_block(rendered, limit)


def button_value(key: ConversationKey, call_id: str, version: int) -> str:
    return json.dumps({"k": str(key), "c": call_id, "v": version}, separators=(",", ":"))


def parse_button_value(value: str) -> tuple[ConversationKey, str, int]:
    """Raises ValueError (or KeyError / TypeError) for a value that is not one of ours."""
    data = json.loads(value)
    if not isinstance(data, dict):
        raise ValueError("not a button value")
    return ConversationKey.parse(str(data["k"])), str(data["c"]), int(data["v"])


def mentions(users: list[str]) -> str:
    names = [f"<@{user}>" for user in users]
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " or " + names[-1]


def approval_blocks(request: ApprovalRequest, call: PendingCall) -> list[dict[str, Any]]:
    deciders = mentions([request.requested_by, *request.approvers])
    return [
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": truncate(
                    f":raised_hand: *Approval needed*: `{escape(call.tool_name)}`", 300
                ),
            },
        },
        {"type": "section", "text": {"type": "mrkdwn", "text": readable_arguments(call.arguments)}},
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": f"Requested by <@{request.requested_by}>. {deciders} can decide, "
                    "here or by replying `approve` or `reject`.",
                }
            ],
        },
        decision_buttons(request.key, call.call_id, request.checkpoint_version),
    ]


def decision_buttons(key: ConversationKey, call_id: str, version: int) -> dict[str, Any]:
    """Approve and Reject for one call, wherever they are shown (the thread's request, the
    Home tab): the same action ids and values, so a click means the same from anywhere."""
    value = button_value(key, call_id, version)
    return {
        "type": "actions",
        "block_id": f"approval:{call_id}"[:255],
        "elements": [
            {
                "type": "button",
                "action_id": APPROVE,
                "style": "primary",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": value,
            },
            {
                "type": "button",
                "action_id": REJECT,
                "style": "danger",
                "text": {"type": "plain_text", "text": "Reject"},
                "value": value,
            },
        ],
    }


def closed_blocks(tool_name: str, arguments: str, verdict: str) -> list[dict[str, Any]]:
    """An approval request whose buttons are replaced by what became of it."""
    return [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": truncate(f"*Approval*: `{escape(tool_name)}`", 300)},
        },
        {"type": "section", "text": {"type": "mrkdwn", "text": readable_arguments(arguments)}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": truncate(verdict, 2000)}]},
    ]


def decided_blocks(decided: Decided) -> list[dict[str, Any]]:
    verdict = "Approved" if decided.approved else "Rejected"
    icon = ":white_check_mark:" if decided.approved else ":no_entry_sign:"
    reason = f" — {escape(decided.reason)}" if decided.reason else ""
    text = f"{icon} {verdict} by <@{decided.user}>{reason}"
    return closed_blocks(decided.tool_name, decided.arguments, text)


def set_aside_blocks(call: PendingCall, why: str) -> list[dict[str, Any]]:
    return closed_blocks(call.tool_name, call.arguments, f":heavy_minus_sign: {why}")


def paused_list_blocks(
    conversations: list[Conversation], link: Callable[[ConversationKey], str]
) -> list[dict[str, Any]]:
    if not conversations:
        return [{"type": "section", "text": {"type": "mrkdwn", "text": "Nothing is paused here."}}]
    blocks: list[dict[str, Any]] = []
    for record in conversations[:20]:
        blocks.append(
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"<{link(record.key)}|Thread {record.key.thread_ts}> · "
                    f"{record.status.value.replace('_', ' ')} · since "
                    f"{record.last_activity_at:%Y-%m-%d %H:%M} UTC",
                },
                "accessory": {
                    "type": "button",
                    "action_id": RESUME,
                    "text": {"type": "plain_text", "text": "Resume"},
                    "value": str(record.key),
                },
            }
        )
    return blocks
