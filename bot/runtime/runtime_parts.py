"""What every serve of this replica shares: the storage and its bridge, the agent and its
fingerprint, the model's window, the ports to the chat surface, the run slots, and the
tasks that outlive the request that began them. One instance per runtime, built whole from
its arguments; the serves, recovery and discards are given it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from datetime import datetime
from typing import Any

from agents import Agent
from agents.memory import SessionSettings
from agents.run_state import CURRENT_SCHEMA_VERSION

from bot.runtime.agent_graph import agents_of
from bot.runtime.attachments import SharedFiles
from bot.runtime.backlog_refusals import BacklogRefusals
from bot.runtime.context_source import ContextSource, NoSource
from bot.runtime.delivery import Outbox, OutcomeSink
from bot.runtime.fingerprint import agent_fingerprint
from bot.runtime.guard import guard_agent
from bot.runtime.history_cache import HistoryCache
from bot.runtime.lease_owner import process_identity
from bot.runtime.mcp_servers import McpServers
from bot.runtime.model_window import ContextWindow
from bot.runtime.outcomes import Outcome
from bot.runtime.progress import Progress, Quiet
from bot.runtime.rate_gate import RateGate
from bot.runtime.run_options import base_run_config
from bot.runtime.slots import Slots
from bot.settings import RuntimeSettings
from storage import CheckpointMeta, Store
from storage.calls import StorageCalls

log = logging.getLogger(__name__)


class RuntimeParts:
    def __init__(
        self,
        store: Store,
        agent: Agent[Any],
        settings: RuntimeSettings,
        *,
        storage_calls: StorageCalls,
        on_outcome: OutcomeSink | None,
        progress: Progress | None,
        source: ContextSource | None,
        owner: str | None,
        agent_version: str,
    ) -> None:
        self.store = store
        self.storage_calls = storage_calls
        self.settings = settings
        self.agent = guard_agent(agent)
        self.agent_version = agent_version
        self.fingerprint = agent_fingerprint(self.agent, agent_version)
        # With MCP servers, the fingerprint is final once each listed its tools (`start`, or
        # the first serve): nothing is verified or committed before.
        self.mcp = McpServers(agents_of(self.agent), check_interval=settings.mcp_check_interval)
        self.mcp.on_change = self._listings_changed
        self.process = owner or process_identity()
        self.on_outcome = on_outcome
        self.progress: Progress = progress or Quiet()
        self.source: ContextSource = source or NoSource()  # earlier messages, names, files
        self.files = SharedFiles(storage_calls)
        self.history = HistoryCache()
        self.refusals = BacklogRefusals(lambda: self.on_outcome, store, storage_calls)
        # At most `max_runs` threads served at once; the rest wait without their leases.
        self.slots = Slots(settings.max_runs)
        self.rate_gate = RateGate()  # a 429 from the model service holds every run back
        self.window = ContextWindow(settings)  # the model's view: budgets, summaries
        self.run_config = base_run_config(settings, self.files, self.rate_gate, self.window)
        self.session_settings = SessionSettings(limit=settings.history_items)
        self.draining = False  # shutting down: nothing new starts
        # Replicas whose last beat is older are taken for dead (set by `heartbeat`).
        self.silent_before: datetime | None = None
        self.background: set[asyncio.Task[None]] = set()  # work that outlives its request

    def _listings_changed(self) -> None:
        self.fingerprint = agent_fingerprint(self.agent, self.agent_version, mcp=self.mcp.listings)

    def meta(self, *, finished: bool = False) -> CheckpointMeta:
        return CheckpointMeta(
            schema_version=CURRENT_SCHEMA_VERSION,
            agent_fingerprint=self.fingerprint,
            finished=finished,
        )

    def in_background(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run `work` in a task that `drain` waits for."""
        task = asyncio.create_task(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return task

    def emit_later(self, outcomes: Sequence[Outcome]) -> None:
        """Deliver outcomes after the request that caused them is acknowledged."""
        self.in_background(self.emit(outcomes))

    async def emit(self, outcomes: Sequence[Outcome]) -> None:
        """Deliver outcomes that are not recorded anywhere (best effort)."""
        outbox = Outbox(self.on_outcome, self.store.clock)
        for outcome in outcomes:
            await outbox.emit_now(outcome)
