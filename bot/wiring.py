"""Assemble the runtime from the environment's settings."""

from __future__ import annotations

from bot.agent_loader import load_agent
from bot.runtime import ConversationRuntime
from bot.settings import RuntimeSettings
from bot.tracing import configure_tracing
from storage import StorageSettings, open_store


def build_runtime(storage: StorageSettings, runtime: RuntimeSettings) -> ConversationRuntime:
    configure_tracing(runtime.tracing, runtime.trace_processors)
    return ConversationRuntime(open_store(storage), load_agent(runtime.agent), runtime)
