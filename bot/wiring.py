"""Assemble the runtime from the environment's settings, over a store the caller opened
(the Slack layer keeps its installations in the same store)."""

from __future__ import annotations

from typing import Any

from agents import Agent

from bot.agent_loader import load_agent
from bot.runtime import ConversationRuntime, guard_agent
from bot.settings import RuntimeSettings
from bot.tracing import configure_tracing
from storage import Store


def checked_agent(runtime: RuntimeSettings) -> Agent[Any]:
    """The operator's agent, loaded and guarded: raises at once for one the bot cannot run
    (before any storage is opened, so the refusal is the process's only word)."""
    return guard_agent(load_agent(runtime.agent))


def build_runtime(
    store: Store, runtime: RuntimeSettings, agent: Agent[Any] | None = None
) -> ConversationRuntime:
    configure_tracing(runtime.tracing, runtime.trace_processors)
    return ConversationRuntime(store, agent or checked_agent(runtime), runtime)
