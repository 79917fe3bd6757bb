"""What a bot post is, in ONE place, because message texts change: an answer, an approval
request (or a reminder), a notice of some kind, or a decision.

Slack message `metadata` wins when present (`event_type` plus an `event_payload` naming the
outcome kind and its outbox id); otherwise the shape of today's posts decides: approval
requests carry Approve/Reject buttons, decisions read ":white_check_mark: `tool` approved by
<@U>" (the request's card edited to say it, or a post when the card could not be; see
`is_decision`), notices start with one of the poster's icons."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bot.runtime import NoticeKind
from bot.slackapp.blocks import APPROVE
from bot.slackapp.poster import NOTICE_ICONS


class PostKind(StrEnum):
    ANSWER = "answer"
    APPROVAL_REQUEST = "approval_request"
    NOTICE = "notice"
    DECISION = "decision"
    OTHER = "other"


@dataclass(frozen=True)
class Classified:
    kind: PostKind
    notice: str | None = None  # a NoticeKind value (icons shared by two kinds give the first)
    reminder: bool = False
    call_ids: tuple[str, ...] = ()  # approval requests: the calls they ask about
    version: int | None = None  # approval requests: the checkpoint version of the buttons
    outbox_id: str | None = None  # from metadata, when the bot sends it


_ICON_KIND = {icon: kind.value for kind, icon in reversed(list(NOTICE_ICONS.items()))}
# The poster's `decision_text`: its icon (shared with notices), then the tool and verdict.
_DECISION = re.compile(r"^(?::[a-z_]+: )?`[^`]+` (approved|rejected) by <@")
_KIND_NAMES = {
    "answer": PostKind.ANSWER,
    "approvalrequest": PostKind.APPROVAL_REQUEST,
    "approval_request": PostKind.APPROVAL_REQUEST,
    "approval": PostKind.APPROVAL_REQUEST,
    "notice": PostKind.NOTICE,
    "decided": PostKind.DECISION,
    "decision": PostKind.DECISION,
}


def classify_post(args: dict[str, Any]) -> Classified:
    """Classify one `chat.postMessage` by its arguments (`text`, `blocks`, `metadata`)."""
    buttons = approval_buttons(args.get("blocks"))
    metadata = _json(args.get("metadata"))
    if isinstance(metadata, dict) and isinstance(metadata.get("event_payload"), dict):
        payload: dict[str, Any] = metadata["event_payload"]
        name = str(
            payload.get("outcome") or payload.get("type") or payload.get("kind") or ""
        ).lower()
        kind = _KIND_NAMES.get(name)
        notice = payload.get("notice_kind") or payload.get("notice")
        if kind is None and name in {k.value for k in NoticeKind}:
            kind, notice = PostKind.NOTICE, name
        if kind is not None:
            outbox = payload.get("outbox_id") or payload.get("outbox") or payload.get("id")
            if outbox and payload.get("part") is not None:
                outbox = f"{outbox}/{payload['part']}"  # one outcome, several posts
            return Classified(
                kind=kind,
                notice=str(notice) if notice else None,
                reminder=bool(payload.get("reminder", False)),
                call_ids=tuple(c for c, _ in buttons),
                version=buttons[0][1] if buttons else None,
                outbox_id=str(outbox) if outbox else None,
            )
    if buttons:
        return Classified(
            kind=PostKind.APPROVAL_REQUEST,
            reminder="(asked again)" in json.dumps(args.get("blocks")),
            call_ids=tuple(call for call, _ in buttons),
            version=buttons[0][1],
        )
    if is_decision(args):
        return Classified(kind=PostKind.DECISION)
    text = str(args.get("text") or "")
    icon = text.split(" ", 1)[0]
    if icon in _ICON_KIND:
        return Classified(kind=PostKind.NOTICE, notice=_ICON_KIND[icon])
    if text:
        return Classified(kind=PostKind.ANSWER)
    return Classified(kind=PostKind.OTHER)


def is_decision(args: dict[str, Any]) -> bool:
    """A `chat.postMessage` or `chat.update` that says a decision: the approval request's
    card edited to say it (it keeps the request's metadata), or the post saying it when the
    card could not be edited. Checked before the notice icons: the approval's is shared."""
    return bool(_DECISION.match(str(args.get("text") or ""))) and not approval_buttons(
        args.get("blocks")
    )


def approved(args: dict[str, Any]) -> bool:
    """A decision (`is_decision`) that approved its call."""
    found = _DECISION.match(str(args.get("text") or ""))
    return found is not None and found.group(1) == "approved"


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def approval_buttons(blocks: Any) -> list[tuple[str, int]]:
    """(call id, checkpoint version) of each Approve button in the blocks."""
    found: list[tuple[str, int]] = []
    for block in _json(blocks) or []:
        if not isinstance(block, dict) or block.get("type") != "actions":
            continue
        for element in block.get("elements", []):
            if element.get("action_id") == APPROVE:
                value = _json(element.get("value")) or {}
                found.append((str(value.get("c", "")), int(value.get("v", 0))))
    return found
