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
    StatusReply,
)
from bot.runtime.runtime import ConversationRuntime, Kept, StaleFilter

__all__ = [
    "Answer",
    "ApprovalRequest",
    "ConversationRuntime",
    "Decided",
    "Discarded",
    "Duplicate",
    "Kept",
    "Notice",
    "NoticeKind",
    "Outcome",
    "PendingCall",
    "Refused",
    "StaleFilter",
    "StatusReply",
    "retry_safe",
]
