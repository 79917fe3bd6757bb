"""Durable conversation state for the bot. Knows nothing of Slack or of `bot`."""

from typing import TYPE_CHECKING, Any

from storage.base import Store
from storage.calls import StorageCalls
from storage.config import StorageSettings, open_store
from storage.errors import (
    CheckpointConflict,
    CheckpointCorrupt,
    CheckpointError,
    CheckpointMissing,
    CheckpointTruncated,
    ContentMissing,
    InboxChanged,
    LeaseBusy,
    LeaseLost,
    NotFound,
    SessionConflict,
    SessionItemError,
    StorageError,
    StorageUnavailable,
)
from storage.installations import Removal
from storage.lease import LeaseKeeper
from storage.models import (
    SUMMARY_LIMIT,
    CheckpointMeta,
    CheckpointPointer,
    Conversation,
    ConversationKey,
    DeliveryMark,
    Expiry,
    FeedbackTally,
    InboxEntry,
    Lease,
    Refusal,
    Status,
    Summary,
    ToolCallClaim,
    ToolCallRecord,
    ToolCallStatus,
    Verdict,
)
from storage.people import Person, PersonKey
from storage.writes import CONSUME_LIMIT, KEEP, Commit, Committed, SessionPage

if TYPE_CHECKING:
    from storage.session import ConversationSession


def __getattr__(name: str) -> Any:
    # The Session imports the Agents SDK (~2 s): only pay for it when it is used.
    if name == "ConversationSession":
        from storage.session import ConversationSession

        return ConversationSession
    raise AttributeError(name)


__all__ = [
    "CONSUME_LIMIT",
    "KEEP",
    "SUMMARY_LIMIT",
    "CheckpointConflict",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointMeta",
    "CheckpointMissing",
    "CheckpointPointer",
    "CheckpointTruncated",
    "Commit",
    "Committed",
    "ContentMissing",
    "Conversation",
    "ConversationKey",
    "ConversationSession",
    "DeliveryMark",
    "Expiry",
    "FeedbackTally",
    "InboxChanged",
    "InboxEntry",
    "Lease",
    "LeaseBusy",
    "LeaseKeeper",
    "LeaseLost",
    "NotFound",
    "Person",
    "PersonKey",
    "Refusal",
    "Removal",
    "SessionConflict",
    "SessionItemError",
    "SessionPage",
    "Status",
    "StorageCalls",
    "StorageError",
    "StorageSettings",
    "StorageUnavailable",
    "Store",
    "Summary",
    "ToolCallClaim",
    "ToolCallRecord",
    "ToolCallStatus",
    "Verdict",
    "open_store",
]
