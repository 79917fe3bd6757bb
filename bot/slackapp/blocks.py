"""Block Kit messages: approval requests, decisions, set-aside requests, the paused list.
Tool names and arguments come from the model: they are escaped (see `text`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from bot.runtime import ApprovalRequest, Decided, PendingCall, status_name
from bot.slackapp.text import code_block, escape, truncate
from storage import Conversation, ConversationKey, Status

APPROVE = "approval_approve"
REJECT = "approval_reject"
RESUME = "resume_thread"
ARGUMENTS_LIMIT = 2500
SECTION_LIMIT = 3000  # characters of a section block's text


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
    version = data["v"]
    if type(version) is not int:  # as `button_value` wrote it (`int()` takes "3", 1.5, True)
        raise ValueError("not a button value")
    return ConversationKey.parse(str(data["k"])), str(data["c"]), version


def mentions(users: list[str]) -> str:
    names = [f"<@{user}>" for user in users]
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " or " + names[-1]


def asked(tool_name: str, agent: str | None) -> str:
    """The call a request is about, and the agent asking for it when it is not the bot's
    own (a handoff's target, an agent used as a tool)."""
    call = f"`{escape(tool_name)}`"
    return f"{call}, asked by the `{escape(agent)}` agent" if agent else call


def approval_blocks(request: ApprovalRequest, call: PendingCall) -> list[dict[str, Any]]:
    deciders = mentions([request.requested_by, *request.approvers])
    return [
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": truncate(
                    f":raised_hand: *Approval needed*: {asked(call.tool_name, call.agent)}", 300
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


def closed_blocks(
    tool_name: str, arguments: str, verdict: str, agent: str | None = None
) -> list[dict[str, Any]]:
    """An approval request whose buttons are replaced by what became of it."""
    return [
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": truncate(f"*Approval*: {asked(tool_name, agent)}", 300),
            },
        },
        {"type": "section", "text": {"type": "mrkdwn", "text": readable_arguments(arguments)}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": truncate(verdict, 2000)}]},
    ]


def decision_text(decided: Decided) -> str:
    """What became of an approval request, said once: the card's own text (and its first
    section), or the post that says it when there is no card to edit."""
    if decided.approved:
        icon, verdict = ":white_check_mark:", "approved"
    else:
        icon, verdict = ":no_entry_sign:", "rejected"
    reason = f": {escape(decided.reason)}" if decided.reason else ""
    return f"{icon} `{escape(decided.tool_name)}` {verdict} by <@{decided.user}>{reason}"


def decided_blocks(decided: Decided) -> list[dict[str, Any]]:
    """The request's card once decided: the decision, then the arguments it was about."""
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": _decision_section(decided)}}
    ]
    if decided.arguments:
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": readable_arguments(decided.arguments)},
            }
        )
    if decided.agent:
        who = f"Asked by the `{escape(decided.agent)}` agent."
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": truncate(who, 300)}]}
        )
    return blocks


def shows_decision(message: dict[str, Any], decided: Decided) -> bool:
    """The card already says this decision (Slack adds block ids: the text is compared)."""
    wanted = _decision_section(decided)
    return any(
        isinstance(block, dict) and (block.get("text") or {}).get("text") == wanted
        for block in message.get("blocks") or []
    )


def _decision_section(decided: Decided) -> str:
    return truncate(decision_text(decided), SECTION_LIMIT)


def set_aside_blocks(call: PendingCall, why: str) -> list[dict[str, Any]]:
    return closed_blocks(call.tool_name, call.arguments, f":heavy_minus_sign: {why}", call.agent)


def paused_list_blocks(
    conversations: list[Conversation],
    link: Callable[[ConversationKey], str],
    *,
    said: str | None = None,
) -> list[dict[str, Any]]:
    """`/resume`'s list of a channel's paused threads, each with what can be done there: an
    interrupted one gets Resume; one awaiting approval, a link to its request (a decision
    continues it, not `/resume`). `said`: an answer shown above the list (the list as it
    stands after a Resume, which replaces the one clicked)."""
    blocks: list[dict[str, Any]] = []
    if said:
        blocks.append(_mrkdwn_section(truncate(said, SECTION_LIMIT)))
    if not conversations:
        return [*blocks, _mrkdwn_section("Nothing is paused here.")]
    for record in conversations[:20]:
        thread = link(record.key)
        line = (
            f"<{thread}|Thread {record.key.thread_ts}> · {status_name(record.status)} · since "
            f"{record.last_activity_at:%Y-%m-%d %H:%M} UTC"
        )
        if record.status is Status.AWAITING_APPROVAL:
            blocks.append(
                _mrkdwn_section(f"{line}\nIt waits for a decision: <{thread}|see its request>.")
            )
            continue
        blocks.append(
            {
                **_mrkdwn_section(line),
                "accessory": {
                    "type": "button",
                    "action_id": RESUME,
                    "text": {"type": "plain_text", "text": "Resume"},
                    "value": str(record.key),
                },
            }
        )
    return blocks


def _mrkdwn_section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}
