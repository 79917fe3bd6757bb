"""Block Kit for the agent experience: answers as Markdown, feedback buttons under them, the
Stop control. Answer text is made safe by `markdown.safe_markdown` before it gets here."""

from __future__ import annotations

import json
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ContextActionsBlock,
    FeedbackButtonObject,
    FeedbackButtonsElement,
    MarkdownBlock,
    SectionBlock,
)

from storage import ConversationKey, Verdict

FEEDBACK = "answer_feedback"
STOP = "stop_run"


def markdown_block(text: str) -> dict[str, Any]:
    return MarkdownBlock(text=text).to_dict()


def feedback_blocks(key: ConversationKey, answer: str) -> list[dict[str, Any]]:
    """Thumbs up / down under an answer; each button's value names the answer."""

    def value(verdict: Verdict) -> str:
        return json.dumps({"k": str(key), "a": answer, "v": verdict.value}, separators=(",", ":"))

    buttons = FeedbackButtonsElement(
        action_id=FEEDBACK,
        positive_button=FeedbackButtonObject(
            text="Good answer",
            accessibility_label="Mark as a good answer",
            value=value(Verdict.GOOD),
        ),
        negative_button=FeedbackButtonObject(
            text="Bad answer", accessibility_label="Mark as a bad answer", value=value(Verdict.BAD)
        ),
    )
    return [ContextActionsBlock(elements=[buttons]).to_dict()]


def parse_feedback(value: str) -> tuple[ConversationKey, str, Verdict]:
    """Raises ValueError (or KeyError / TypeError) for a value that is not one of ours."""
    data = json.loads(value)
    if not isinstance(data, dict):
        raise ValueError("not a feedback value")
    return ConversationKey.parse(str(data["k"])), str(data["a"]), Verdict(str(data["v"]))


def stop_blocks(key: ConversationKey) -> list[dict[str, Any]]:
    """The Stop control, shown to the person whose run is working."""
    return [
        SectionBlock(text="Working on it. Changed your mind?").to_dict(),
        ActionsBlock(
            elements=[
                ButtonElement(text="Stop", action_id=STOP, value=str(key), style="danger"),
            ]
        ).to_dict(),
    ]
