"""The conversation runtime: Slack-agnostic, built from its parts (drawn in docs/design.md).

A message or a decision is first *kept* (one durable write to the thread's inbox; the caller
acknowledges the delivery only after that), then the thread is *served* by whoever takes its
lease. A graceful shutdown (`drain`) lets runs reach their next checkpoint and gives their
threads up at once; recovery takes over threads whose holder died, at once when that holder
is provably dead on this host, else when its lease expires."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from agents import Agent

from bot.runtime.acks_first import AcksFirst
from bot.runtime.agent_changed import set_aside_changed
from bot.runtime.context_source import ContextSource
from bot.runtime.delivery import OutcomeSink
from bot.runtime.discarding import Listed, StaleFilter, discard_conversation
from bot.runtime.expiry import EXPIRED
from bot.runtime.intake import EXPIRED_STOP, NOT_YOURS_TO_STOP, Intake, Kept, Stopping
from bot.runtime.lease_owner import new_owner
from bot.runtime.outcomes import Duplicate, Outcome, Refused
from bot.runtime.people import People
from bot.runtime.progress import Progress
from bot.runtime.queries import Queries
from bot.runtime.recovery import recover_conversations
from bot.runtime.removals import Removals
from bot.runtime.runtime_parts import RuntimeParts
from bot.runtime.scheduler import EXPIRED_RESUME, NEUTRAL, Scheduler
from bot.runtime.slots import Slots
from bot.settings import RuntimeSettings
from storage import ConversationKey, PersonKey, Store
from storage.calls import StorageCalls

# Names callers import from here, whose homes are the runtime's parts.
__all__ = [
    "EXPIRED_RESUME",
    "EXPIRED_STOP",
    "NEUTRAL",
    "NOT_YOURS_TO_STOP",
    "ConversationRuntime",
    "Kept",
    "Listed",
    "StaleFilter",
    "Stopping",
]

log = logging.getLogger(__name__)


class ConversationRuntime:
    def __init__(
        self,
        store: Store,
        agent: Agent[Any],
        settings: RuntimeSettings | None = None,
        *,
        on_outcome: OutcomeSink | None = None,
        progress: Progress | None = None,
        owner: str | None = None,
        agent_version: str = "",
        source: ContextSource | None = None,
        storage_calls: StorageCalls | None = None,
    ) -> None:
        """Built whole: the ports (`on_outcome`, `progress`, `source`) are given here and
        never changed. `storage_calls` is the storage bridge to share with the caller (the Slack
        layer's installations go through it); by default the runtime opens its own."""
        storage_calls = storage_calls or StorageCalls(store)
        assert storage_calls.store is store, "the runtime's storage bridge is over its own store"
        self.parts = RuntimeParts(
            store,
            agent,
            settings or RuntimeSettings(),
            storage_calls=storage_calls,
            on_outcome=on_outcome,
            progress=progress,
            source=source,
            owner=owner,
            agent_version=agent_version,
        )
        self.store, self.storage_calls, self.settings = store, storage_calls, self.parts.settings
        self.agent, self.mcp, self.process = self.parts.agent, self.parts.mcp, self.parts.process
        self.queries = Queries(store, storage_calls, self.settings)
        self.people = People(store, storage_calls)
        self.acks_first = AcksFirst()
        self.intake = Intake(self.parts, self.queries, self.acks_first)
        self.stops = self.intake.stops
        self.scheduler = Scheduler(
            self.parts, self.intake, self.queries, self.people, self.acks_first
        )
        self.removals = Removals(self.parts)
        self.changed_agent: asyncio.Task[None] | None = None  # `set_aside_changed_soon`

    @property
    def draining(self) -> bool:
        return self.parts.draining

    @property
    def admission(self) -> Slots:
        """The run slots (`BOT_MAX_RUNS`), under the name the defect reproductions read."""
        return self.parts.slots

    # -- keeping, then serving ------------------------------------------------------------

    async def handle_message(
        self, key: ConversationKey, *, event_id: str, user: str, text: str, ts: str | None = None
    ) -> list[Outcome]:
        """Keep, then serve: a user's message in a thread."""
        kept = await self.intake.keep_message(
            key, event_id=event_id, user=user, text=text, ts=ts, take=True
        )
        if kept is Kept.DUPLICATE:
            return [Duplicate(key=key, event_id=event_id)]
        return await self.serve(key)

    async def decide(
        self,
        key: ConversationKey,
        *,
        call_id: str,
        approve: bool,
        user: str,
        checkpoint_version: int,
        reason: str | None = None,
        request_message: str | None = None,
        event_id: str | None = None,
    ) -> list[Outcome]:
        """A decision from a button: kept, then served. Late or repeated decisions, and
        decisions by someone not allowed, change nothing and are answered (`Refused`).
        `event_id` names the click (Slack's ids for it, as `keep_decision` is given them by
        the Slack layer); None: a decision nobody delivers again, given an id of its own."""
        kept = await self.intake.keep_decision(
            key,
            event_id=event_id or f"decision:{new_owner()}",
            call_id=call_id,
            approve=approve,
            user=user,
            checkpoint_version=checkpoint_version,
            reason=reason,
            request_message=request_message,
            take=True,
        )
        if kept is Kept.NOT_OURS:
            return [Refused(key=key, text=EXPIRED, user=user)]
        return await self.serve(key)

    async def request_stop(
        self,
        key: ConversationKey,
        user: str,
        *,
        event_id: str | None = None,
        reply_to: str | None = None,
    ) -> Stopping:
        """Ask the run in progress to stop (the Stop control), then serve the thread when the
        stop's write took it (see `StopInbox.keep_stop`). `event_id`: None for a request
        nobody delivers again, given an id of its own."""
        stopping = await self.stops.keep_stop(
            key, user, event_id=event_id or f"stop:{user}:{uuid.uuid4().hex}", reply_to=reply_to
        )
        if stopping.serve:
            await self.serve(key)
        return stopping

    def opens_conversation(self, key: ConversationKey) -> bool:
        return self.intake.opens_conversation(key)

    async def serve(
        self, key: ConversationKey, *, opened_by: PersonKey | None = None
    ) -> list[Outcome]:
        return await self.scheduler.serve(key, opened_by=opened_by)

    def serve_soon(self, key: ConversationKey, *, opened_by: PersonKey | None = None) -> None:
        self.scheduler.serve_soon(key, opened_by=opened_by)

    # -- operators ----------------------------------------------------------------------

    async def discard(
        self, key: ConversationKey, *, by: str | None, only_if: StaleFilter | None = None
    ) -> list[Outcome]:
        """Admin: set the conversation's saved state aside (see `discarding`)."""
        return await discard_conversation(self.parts, key, by=by, only_if=only_if)

    def set_aside_changed_soon(self) -> None:
        """In a task of its own (which `drain` waits for; `changed_agent` is it): set aside
        the conversations another agent paused for approval, their threads told and their
        cards closed (see `agent_changed`). A failure is logged."""
        self.changed_agent = self.parts.in_background(self._set_aside_changed())

    async def _set_aside_changed(self) -> None:
        try:
            await set_aside_changed(self.scheduler)
        except Exception:
            log.exception("setting aside what another agent paused failed")

    async def recover(self, *, limit: int = 1000) -> list[Outcome]:
        """Resume conversations whose holder died (see `recovery`), and finish the removals
        of workspaces whose process died first (see `removals`)."""
        await self.removals.sweep()
        return await recover_conversations(self.scheduler, limit=limit)

    # -- starting and shutting down -------------------------------------------------------

    async def start(self) -> None:
        """Connect the agents' MCP servers and list their tools (before the process reports
        healthy); a runtime that was not started does this on its first serve."""
        await self.mcp.start()

    async def close(self) -> None:
        """After `drain`: clean the MCP servers up (a stdio server's process ends)."""
        await self.mcp.close()

    def acknowledging(self) -> contextlib.AbstractContextManager[None]:
        """Around a Slack request until it is answered: new runs wait meanwhile (at most
        `acks_first.PATIENCE`), so that a burst is acknowledged before its runs take the
        process's CPU."""
        return self.acks_first.keeping()

    async def drain(self, grace: float) -> None:
        """Graceful shutdown: start nothing new; let runs reach their next checkpoint within
        `grace` seconds (they then give their threads up as `running`); cancel what is left
        (a tool cut short stays `started`: its outcome is unknown, never "failed")."""
        self.parts.draining = True
        self.parts.slots.close()  # threads waiting for a slot wait in storage instead
        await self.parts.refusals.flush()
        pending = self.intake.serving | self.parts.background
        if pending:
            log.info("draining: %d threads in progress", len(pending))
            _, pending = await asyncio.wait(pending, timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=10)
