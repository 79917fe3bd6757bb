"""Block Kit messages: approval requests, decisions, the paused-conversations list."""

from __future__ import annotations

import json
from typing import Any

from bot.runtime.outcomes import ApprovalRequest, Decided, PendingCall
from storage import Conversation, ConversationKey

APPROVE = "approval_approve"
REJECT = "approval_reject"
RESUME = "resume_thread"
SECTION_LIMIT = 3000
ARGUMENTS_LIMIT = 2500


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 20] + f"… ({len(text)} chars)"


def readable_arguments(arguments: str) -> str:
    try:
        rendered = json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        rendered = arguments
    return truncate(rendered.replace("```", "`\u200b``"), ARGUMENTS_LIMIT)


def button_value(key: ConversationKey, call_id: str, version: int) -> str:
    return json.dumps({"k": str(key), "c": call_id, "v": version}, separators=(",", ":"))


def parse_button_value(value: str) -> tuple[ConversationKey, str, int]:
    data = json.loads(value)
    return ConversationKey.parse(data["k"]), str(data["c"]), int(data["v"])


def approval_blocks(request: ApprovalRequest, call: PendingCall) -> list[dict[str, Any]]:
    value = button_value(request.key, call.call_id, request.checkpoint_version)
    again = " (asked again)" if request.reminder else ""
    return [
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": truncate(
                    f":raised_hand: *Approval needed{again}*: `{call.tool_name}`", 300
                ),
            },
        },
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": f"```{readable_arguments(call.arguments)}```"},
        },
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": f"Requested by <@{request.requested_by}>. Approvers: that person "
                    "or a configured approver. You can also reply `approve` or `reject`.",
                }
            ],
        },
        {
            "type": "actions",
            "block_id": f"approval:{call.call_id}"[:255],
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
        },
    ]


def decided_blocks(decided: Decided) -> list[dict[str, Any]]:
    """The approval message with its buttons replaced by who decided what."""
    verdict = "Approved" if decided.approved else "Rejected"
    icon = ":white_check_mark:" if decided.approved else ":no_entry_sign:"
    reason = f" — {decided.reason}" if decided.reason else ""
    return [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": truncate(f"*Approval*: `{decided.tool_name}`", 300)},
        },
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": f"```{readable_arguments(decided.arguments)}```"},
        },
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": truncate(f"{icon} {verdict} by <@{decided.user}>{reason}", 2000),
                }
            ],
        },
    ]


def paused_list_blocks(conversations: list[Conversation], link: Any) -> list[dict[str, Any]]:
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


def split_text(text: str, limit: int = 3900) -> list[str]:
    """Split on paragraph, then line, then hard boundaries, each piece within `limit`."""
    pieces: list[str] = []
    rest = text
    while len(rest) > limit:
        cut = max(rest.rfind("\n\n", 0, limit), rest.rfind("\n", 0, limit))
        if cut <= limit // 2:
            cut = rest.rfind(" ", 0, limit)
        if cut <= limit // 2:
            cut = limit
        pieces.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip("\n ")
    pieces.append(rest)
    return [piece for piece in pieces if piece] or [""]
