"""The Slack-agnostic conversation runtime."""

from bot.runtime.delivery import DeliveryFailed, OutcomeSink
from bot.runtime.guard import idempotent, retry_safe
from bot.runtime.outcomes import (
    Answer,
    ApprovalRequest,
    Decided,
    DeliveryRef,
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
    "DeliveryFailed",
    "DeliveryRef",
    "Discarded",
    "Duplicate",
    "Kept",
    "Notice",
    "NoticeKind",
    "Outcome",
    "OutcomeSink",
    "PendingCall",
    "Refused",
    "StaleFilter",
    "StatusReply",
    "idempotent",
    "retry_safe",
]
