"""The conversation runtime's operations: keep, serve, decide, resume, stop, discard,
recover, drain. Slack-agnostic. What may be asked without serving a thread (conversations,
counts, health) is in `queries`; keeping a request in `keeping`; serving it when a slot
admits it in `admitting`; stop requests in `stop_requests`; `/resume` in `resuming`;
recovery in `recovery`; discarding in `discarding`.

A message or a decision is first *kept* (one durable write to the thread's inbox; the caller
acknowledges the delivery only after that), then the thread is *served* by whoever takes its
lease (see `serving`). A graceful shutdown (`drain`) lets runs reach their next checkpoint
and gives their threads up at once; recovery takes over threads whose holder died, at once
when that holder is provably dead on this host, else when its lease expires."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Coroutine, Sequence
from datetime import datetime
from typing import Any

from agents import Agent
from agents.memory import SessionSettings
from agents.run_state import CURRENT_SCHEMA_VERSION

from bot import metrics
from bot.runtime.admission import Admission
from bot.runtime.admitting import Served
from bot.runtime.agent_changed import set_aside_changed
from bot.runtime.agent_graph import agents_of
from bot.runtime.attachments import SharedFiles
from bot.runtime.context_source import ContextSource, NoSource
from bot.runtime.context_window import ContextWindow
from bot.runtime.delivery import OutcomeSink
from bot.runtime.discarding import Listed, StaleFilter, discard_conversation
from bot.runtime.expiry import EXPIRED
from bot.runtime.fingerprint import agent_fingerprint
from bot.runtime.guard import guard_agent
from bot.runtime.history_cache import HistoryCache
from bot.runtime.keeping import Kept
from bot.runtime.keeps_first import KeepsFirst
from bot.runtime.lease_owner import new_owner, process_identity
from bot.runtime.mcp_servers import McpServers
from bot.runtime.not_taken import NotTaken
from bot.runtime.outcomes import Duplicate, Outcome, Refused
from bot.runtime.progress import Progress, Quiet
from bot.runtime.rate_gate import RateGate
from bot.runtime.recovery import recover_conversations
from bot.runtime.removals import finish_removal, left_behind, place
from bot.runtime.resuming import EXPIRED_RESUME, NEUTRAL, Resuming
from bot.runtime.run_options import base_run_config
from bot.runtime.serving import Serving
from bot.runtime.stop_requests import EXPIRED_STOP, NOT_YOURS_TO_STOP, Stopping, StopRequests
from bot.runtime.waiting import Waiting, waiting_for
from bot.settings import RuntimeSettings
from storage import (
    CheckpointMeta,
    Conversation,
    ConversationKey,
    Lease,
    PersonKey,
    Removal,
    Store,
)
from storage.calls import StorageCalls

# Names callers import from here, whose homes are the runtime's rooms.
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


class ConversationRuntime(Resuming, StopRequests):
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
        io: StorageCalls | None = None,
    ) -> None:
        """Built whole: the ports (`on_outcome`, `progress`, `source`) are given here and
        never changed. `io` is the storage bridge to share with the caller (the Slack
        layer's installations go through it); by default the runtime opens its own."""
        self.store = store
        self.io = io or StorageCalls(store)
        assert self.io.store is store, "the runtime's storage bridge is over its own store"
        self.settings = settings or RuntimeSettings()
        self.agent = guard_agent(agent)
        self.agent_version = agent_version
        self.fingerprint = agent_fingerprint(self.agent, agent_version)
        # The agents' MCP servers; with any, the fingerprint is final once each listed its
        # tools (`start`, or the first serve), and nothing is verified or committed before.
        self.mcp = McpServers(
            agents_of(self.agent), check_interval=self.settings.mcp_check_interval
        )
        self.mcp.on_change = self._listings_changed
        self.mcp.on_back = self._continue_waiting
        self.process = owner or process_identity()
        # Replicas whose last beat is older are taken for dead (set by `heartbeat`).
        self.silent_before: datetime | None = None
        self.sink = on_outcome
        self.progress: Progress = progress or Quiet()
        self.source: ContextSource = source or NoSource()  # earlier messages, names, files
        self.files = SharedFiles(self.io)
        self.draining = False
        self.history = HistoryCache()
        self._serving: set[asyncio.Task[Any]] = set()
        self.keeps = KeepsFirst()
        self.not_taken = NotTaken(lambda: self.sink, self.store, self.io)
        self._emitting: set[asyncio.Task[None]] = set()  # outcomes sent after an ack
        self._removing: set[str] = set()  # the removals this process is finishing
        self.changed_agent: asyncio.Task[None] | None = None  # `set_aside_changed_soon`
        # Threads taken by the write that kept their message, for `serve` to use at once.
        self._taken: dict[ConversationKey, tuple[Lease, Conversation]] = {}
        self._live: dict[ConversationKey, Serving] = {}  # threads this process serves now
        # At most `max_runs` threads served at once; the rest wait without their leases.
        self.admission = Admission(self.settings.max_runs)
        self.rate_gate = RateGate()  # a 429 from the model service holds every run back
        self._requesters: dict[ConversationKey, str] = {}  # whose slot a serve takes
        self.window = ContextWindow(self.settings)  # the model's view: budgets, summaries
        self.run_config = base_run_config(self.settings, self.files, self.rate_gate, self.window)
        self.session_settings = SessionSettings(limit=self.settings.history_items)

    # -- keeping and serving (the rest in `keeping`, `admitting`) -----------------------

    async def waiting_for(
        self, person: PersonKey, including: Collection[ConversationKey] = ()
    ) -> list[Waiting]:
        """The approvals `person` may decide, with those of `including` that began waiting
        just now (see `waiting`)."""
        return await waiting_for(self, person, including)

    async def handle_message(
        self, key: ConversationKey, *, event_id: str, user: str, text: str, ts: str | None = None
    ) -> list[Outcome]:
        """Keep, then serve: a user's message in a thread."""
        kept = await self.keep_message(
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
        kept = await self.keep_decision(
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

    # -- operators ----------------------------------------------------------------------

    async def discard(
        self, key: ConversationKey, *, by: str | None, only_if: StaleFilter | None = None
    ) -> list[Outcome]:
        """Admin: set the conversation's saved state aside (see `discarding`)."""
        return await discard_conversation(self, key, by=by, only_if=only_if)

    def set_aside_changed_soon(self) -> None:
        """In a task of its own (which `drain` waits for; `changed_agent` is it): set aside
        the conversations another agent paused for approval, their threads told and their
        cards closed (see `agent_changed`). A failure is logged."""
        self.changed_agent = self._in_background(self._set_aside_changed())

    async def _set_aside_changed(self) -> None:
        try:
            await set_aside_changed(self)
        except Exception:
            log.exception("setting aside what another agent paused failed")

    async def recover(self, *, limit: int = 1000) -> list[Outcome]:
        """Resume conversations whose holder died (see `recovery`), and finish the removals
        of workspaces whose process died first (see `removals`)."""
        if not self.draining:
            pending = await self.io(self.store.pending_removals)
            for removal in left_behind(pending, self.store.clock(), self):
                self.finish_removal_soon(removal)
        return await recover_conversations(self, limit=limit)

    # -- workspaces that removed the app (see `removals`) ---------------------------------

    async def removal_known(self, removal_id: str) -> bool:
        """A removal recorded under this id already (pending or finished): told again."""
        return await self.io(self.store.find_removal, removal_id) is not None

    async def remove_workspace(
        self, removal_id: str, *, team: str | None, enterprise: str | None
    ) -> bool:
        """A workspace (every workspace of `enterprise` when `team` is None) removed the app:
        recorded durably (call it before what told of it is acknowledged), then its
        conversations begun before now are discarded in a task of its own (which `drain`
        waits for; a failure, or a process that dies first, leaves it to the recovery
        sweep). False, and nothing more, when `removal_id` was recorded already."""
        removal = Removal(
            removal_id=removal_id, team=team, enterprise=enterprise, at=self.store.clock()
        )
        if not await self.io(self.store.record_removal, removal):
            return False
        self.finish_removal_soon(removal)
        return True

    def finish_removal_soon(self, removal: Removal) -> None:
        """Discard the conversations `removal` applies to, then mark it finished, in a task
        of its own (unless one of this process does it already)."""
        if removal.removal_id in self._removing:
            return
        self._removing.add(removal.removal_id)
        self._in_background(self._finish_removal(removal))

    async def _finish_removal(self, removal: Removal) -> None:
        try:
            await finish_removal(self, removal)
        except Exception:
            log.exception(
                "finishing the removal from %s failed; recovery tries again", place(removal)
            )
        finally:
            self._removing.discard(removal.removal_id)

    # -- MCP servers --------------------------------------------------------------------

    async def start(self) -> None:
        """Connect the agents' MCP servers and list their tools (before the process reports
        healthy); a runtime that was not started does this on its first serve."""
        await self.mcp.start()

    async def close(self) -> None:
        """After `drain`: clean the MCP servers up (a stdio server's process ends)."""
        await self.mcp.close()

    def _listings_changed(self) -> None:
        self.fingerprint = agent_fingerprint(self.agent, self.agent_version, mcp=self.mcp.listings)

    # -- shutting down ------------------------------------------------------------------

    async def drain(self, grace: float) -> None:
        """Graceful shutdown: start nothing new; let runs reach their next checkpoint within
        `grace` seconds (they then give their threads up as `running`); cancel what is left
        (a tool cut short stays `started`: its outcome is unknown, never "failed")."""
        self.draining = True
        self.admission.close()  # threads waiting for a slot wait in storage instead
        await self.not_taken.flush()
        pending = set(self._serving) | self._emitting
        if pending:
            log.info("draining: %d threads in progress", len(pending))
            _, pending = await asyncio.wait(pending, timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=10)

    async def _serve(self, serving: Serving) -> list[Outcome]:
        task = asyncio.current_task()
        if task is not None:
            self._serving.add(task)
        self._live[serving.key] = serving
        try:
            return await serving.run()
        finally:
            if self._live.get(serving.key) is serving:
                del self._live[serving.key]
            if task is not None:
                self._serving.discard(task)

    async def serve_under_lease(
        self,
        lease: Lease,
        record: Conversation,
        *,
        remind: bool = False,
        recovering: bool = False,
        unheld: bool = False,
        note: PersonKey | None = None,
    ) -> Served:
        """Serve a thread whose lease this process took, as one of its live threads (a stop
        reaches it, `drain` waits for it), until nothing is left to do (`serving`); its
        release notes the conversation for `note`."""
        serving = Serving(
            self, lease, record, remind=remind, recovering=recovering, unheld=unheld, note=note
        )
        outcomes = await self._serve(serving)
        return Served(outcomes, serving.yielded)

    def _serves(self, key: ConversationKey) -> bool:
        return key in self._live

    def _ask_live_to_stop(self, key: ConversationKey, user: str) -> None:
        serving = self._live.get(key)
        if serving is not None:
            serving.ask_stop(user)

    # -- checkpoint metadata ------------------------------------------------------------

    def meta(self, *, finished: bool = False) -> CheckpointMeta:
        return CheckpointMeta(
            schema_version=CURRENT_SCHEMA_VERSION,
            agent_fingerprint=self.fingerprint,
            finished=finished,
        )

    def acknowledging(self) -> contextlib.AbstractContextManager[None]:
        """Around a Slack request until it is answered: new runs wait meanwhile (at most
        `keeps_first.PATIENCE`), so that a burst is acknowledged before its runs take the
        process's CPU."""
        return self.keeps.keeping()

    def serve_soon(self, key: ConversationKey, *, note: PersonKey | None = None) -> None:
        """`serve` in a task of its own (which `drain` waits for), for a request that is
        acknowledged as soon as its message is kept; a failure is logged."""
        self._in_background(self._serve_logged(key, note))

    async def _serve_logged(self, key: ConversationKey, note: PersonKey | None) -> None:
        try:
            with metrics.LATENCY.labels("message").time():
                await self.serve(key, note=note)  # progress shows in the thread
        except Exception:
            log.exception("%s: serving it failed", key)

    def _in_background(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._emitting.add(task)
        task.add_done_callback(self._emitting.discard)
        return task

    def _emit_later(self, outcomes: Sequence[Outcome]) -> None:
        """Deliver outcomes after the request that caused them is acknowledged."""
        self._in_background(self.emit(outcomes))

    async def emit(self, outcomes: Sequence[Outcome]) -> None:
        """Deliver outcomes that are not recorded anywhere (best effort)."""
        from bot.runtime.delivery import Outbox

        outbox = Outbox(self.sink, self.store.clock)
        for outcome in outcomes:
            await outbox.emit_now(outcome)
