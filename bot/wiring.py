"""Assemble the runtime from the environment's settings, over a store the caller opened
(the Slack layer keeps its installations in the same store)."""

from __future__ import annotations

from bot.agent_loader import load_agent
from bot.runtime import ConversationRuntime
from bot.settings import RuntimeSettings
from bot.tracing import configure_tracing
from storage import Store


def build_runtime(store: Store, runtime: RuntimeSettings) -> ConversationRuntime:
    configure_tracing(runtime.tracing, runtime.trace_processors)
    return ConversationRuntime(store, load_agent(runtime.agent), runtime)
