"""The Slack-agnostic conversation runtime: its whole public face.

Everything outside `bot/runtime` imports from here; the modules inside are the runtime's
own and may change shape without notice."""

from bot.runtime.applying_stops import nothing_to_stop
from bot.runtime.attribution import split_author
from bot.runtime.backlog_refusals import notice as not_taken_notice
from bot.runtime.context_source import (
    ContextSource,
    EarlierMessage,
    SharedFile,
    ThreadHistory,
    Unavailable,
)
from bot.runtime.delivery import DeliveryFailed, OutcomeSink
from bot.runtime.discarding import stop_overtaken
from bot.runtime.driver import run_turns
from bot.runtime.envelope import UserMessage
from bot.runtime.expiry import EXPIRED, expiry_text
from bot.runtime.fingerprint import agent_fingerprint
from bot.runtime.guard import UnguardedTool, guard_agent, idempotent, retry_safe
from bot.runtime.heartbeat import keep_beating
from bot.runtime.history_cache import HistoryCache
from bot.runtime.lease_owner import new_owner, owner_pid
from bot.runtime.model_access import needs_openai_key
from bot.runtime.open_calls import STOPPED_BEFORE_IT_RAN, UNKNOWN_OUTCOME, ClosedCalls
from bot.runtime.outcomes import (
    Answer,
    ApprovalRequest,
    AwaitingDecision,
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
    quote,
)
from bot.runtime.progress import Progress, Step
from bot.runtime.queries import PAUSED, Waiting
from bot.runtime.request_context import RequestContext
from bot.runtime.runtime import (
    EXPIRED_RESUME,
    EXPIRED_STOP,
    NEUTRAL,
    NOT_YOURS_TO_STOP,
    ConversationRuntime,
    Kept,
    Listed,
    StaleFilter,
    Stopping,
)
from bot.runtime.status_names import status_name
from bot.runtime.tagged_unions import validating_by_tag
from bot.runtime.viewing import VIEWED_ITEMS, ViewedItem, Viewing
from bot.runtime.warm_up import warm_up

__all__ = [
    "EXPIRED",
    "EXPIRED_RESUME",
    "EXPIRED_STOP",
    "NEUTRAL",
    "NOT_YOURS_TO_STOP",
    "PAUSED",
    "STOPPED_BEFORE_IT_RAN",
    "UNKNOWN_OUTCOME",
    "VIEWED_ITEMS",
    "Answer",
    "ApprovalRequest",
    "AwaitingDecision",
    "ClosedCalls",
    "ContextSource",
    "ConversationRuntime",
    "Decided",
    "DeliveryFailed",
    "DeliveryRef",
    "Discarded",
    "Duplicate",
    "EarlierMessage",
    "HistoryCache",
    "Kept",
    "Listed",
    "Notice",
    "NoticeKind",
    "Outcome",
    "OutcomeSink",
    "PendingCall",
    "Progress",
    "Refused",
    "RequestContext",
    "SharedFile",
    "StaleFilter",
    "StatusReply",
    "Step",
    "Stopping",
    "ThreadHistory",
    "Unavailable",
    "UnguardedTool",
    "UserMessage",
    "ViewedItem",
    "Viewing",
    "Waiting",
    "agent_fingerprint",
    "expiry_text",
    "guard_agent",
    "idempotent",
    "keep_beating",
    "needs_openai_key",
    "new_owner",
    "not_taken_notice",
    "nothing_to_stop",
    "owner_pid",
    "quote",
    "retry_safe",
    "run_turns",
    "split_author",
    "status_name",
    "stop_overtaken",
    "validating_by_tag",
    "warm_up",
]
