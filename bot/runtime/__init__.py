"""The Slack-agnostic conversation runtime."""

from bot.runtime.guard import retry_safe
from bot.runtime.outcomes import (
    Answer,
    ApprovalRequest,
    Decided,
    Discarded,
    Duplicate,
    Notice,
    NoticeKind,
    Outcome,
    PendingCall,
    Refused,
)
from bot.runtime.runtime import ConversationRuntime

__all__ = [
    "Answer",
    "ApprovalRequest",
    "ConversationRuntime",
    "Decided",
    "Discarded",
    "Duplicate",
    "Notice",
    "NoticeKind",
    "Outcome",
    "PendingCall",
    "Refused",
    "retry_safe",
]
