"""The conversation runtime's operations: keep, serve, decide, resume, stop, discard,
recover, drain. Slack-agnostic. What may be asked without serving a thread (conversations,
counts, health) is in `queries`; recovery in `recovery`; discarding in `stewardship`.

A message or a decision is first *kept* (one durable write to the thread's inbox; the caller
acknowledges the delivery only after that), then the thread is *served* by whoever takes its
lease (see `serving`). A graceful shutdown (`drain`) lets runs reach their next checkpoint
and gives their threads up at once; recovery takes over threads whose holder died, at once
when that holder is provably dead on this host, else when its lease expires."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from agents import Agent
from agents.memory import SessionSettings
from agents.run_state import CURRENT_SCHEMA_VERSION

from bot import metrics
from bot.runtime.ack_first import KeepsFirst
from bot.runtime.admission import Admission
from bot.runtime.agent_graph import agents_of
from bot.runtime.attachments import SharedFiles
from bot.runtime.context_source import ContextSource, NoSource, SharedFile
from bot.runtime.delivery import OutcomeSink
from bot.runtime.envelope import DecisionRequest, Probe, StopRequest, UserMessage
from bot.runtime.expiry import EXPIRED
from bot.runtime.fingerprint import agent_fingerprint
from bot.runtime.guard import guard_agent
from bot.runtime.history_cache import HistoryCache
from bot.runtime.holder import new_owner, process_identity
from bot.runtime.mcp_servers import McpServers
from bot.runtime.not_taken import NotTaken
from bot.runtime.outcomes import (
    Duplicate,
    Notice,
    NoticeKind,
    Outcome,
    Refused,
    StatusReply,
)
from bot.runtime.people import People
from bot.runtime.progress import Progress, Quiet, shown
from bot.runtime.queries import Queries
from bot.runtime.rate_gate import RateGate
from bot.runtime.recovery import recover_conversations
from bot.runtime.replies import is_stop_word
from bot.runtime.run_options import base_run_config
from bot.runtime.serving import Serving
from bot.runtime.stewardship import discard_conversation, discard_team
from bot.runtime.text import clean_text
from bot.runtime.viewing import Viewing
from bot.runtime.waiting import Waiting, waiting_for
from bot.settings import RuntimeSettings
from storage import (
    CheckpointMeta,
    Conversation,
    ConversationKey,
    Lease,
    LeaseBusy,
    LeaseLost,
    NotFound,
    PersonKey,
    Refusal,
    Status,
    Store,
)
from storage.calls import StorageCalls
from storage.models import REFUSAL_TEXT

log = logging.getLogger(__name__)
NEUTRAL = (
    "I can't resume that thread: there is nothing of mine to resume there, or it is not one "
    "you took part in."
)
EXPIRED_RESUME = (
    "There is nothing to resume: this conversation's saved state expired, and nothing that "
    "was waiting was run (see the thread). Send a new message there to start again."
)
# What a stop may apply to besides a held thread: a run paused or interrupted.
STOPPABLE = (Status.RUNNING, Status.AWAITING_APPROVAL, Status.INTERRUPTED)
NOT_YOURS_TO_STOP = "Only the person who started this run, an approver or an admin can stop it."
EXPIRED_STOP = "Nothing is running there: this conversation's saved state expired (see the thread)."
CONTINUE_WAIT_STEPS = 300  # tenths of a second
REQUESTERS_KEPT = 10_000  # who sent the message kept last, per thread, until it is served


class Kept(StrEnum):
    KEPT = "kept"
    DUPLICATE = "duplicate"
    NOT_OURS = "not_ours"  # a reply in a thread the bot is not part of
    STOPPING = "stopping"  # `stop` while a run was going: it asked the run to stop
    STOP_REFUSED = "stop_refused"  # `stop` from someone who may not: answered privately
    NOT_TAKEN = "not_taken"  # the thread's backlog is full: the thread is told


@dataclass(frozen=True)
class Stopping:
    accepted: bool
    text: str
    refused: bool = False  # the person may not stop this run (nothing was asked)
    full: bool = False  # the thread's backlog is full: the stop was not kept
    serve: bool = False  # the write took the thread: serve it next (`keep_stop`)


@dataclass(frozen=True)
class StaleFilter:
    """What `discard` re-checks after taking the lease: the conversation is still in one of
    `statuses` and idle for longer than `older_than`."""

    statuses: tuple[Status, ...]
    older_than: timedelta


class ConversationRuntime(Queries, People):
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
        # Threads taken by the write that kept their message, for `serve` to use at once.
        self._taken: dict[ConversationKey, tuple[Lease, Conversation]] = {}
        self._live: dict[ConversationKey, Serving] = {}  # threads this process serves now
        # At most `max_runs` threads served at once; the rest wait without their leases.
        self.admission = Admission(self.settings.max_runs)
        self.rate_gate = RateGate()  # a 429 from the model service holds every run back
        self._requesters: dict[ConversationKey, str] = {}  # whose slot a serve takes
        self.run_config = base_run_config(self.settings, self.files, self.rate_gate)
        self.session_settings = SessionSettings(limit=self.settings.history_items)

    # -- keeping and serving ------------------------------------------------------------

    async def keep_message(
        self,
        key: ConversationKey,
        *,
        event_id: str,
        user: str,
        text: str,
        ts: str | None = None,
        create: bool = True,
        take: bool = False,
        files: Sequence[SharedFile] = (),
        viewing: Viewing | None = None,
    ) -> Kept:
        """Keep a user's message durably in its thread's inbox (deduplicated by event id).
        Without `create`, only a thread the bot is already part of takes it. With `take`,
        the same write takes the thread when it is free, for `serve` to go on with. `files`
        describe what was shared with it (read later, when the model is given it);
        `viewing`, what its author was looking at (given to the model with it)."""
        if is_stop_word(text) and not files:
            stopping = await self._ask_stop(key, user)
            if stopping is not None:
                return stopping
        message = UserMessage(
            user=user,
            text=clean_text(text),
            ts=ts,
            files=list(files),
            addressed=create,
            viewing=viewing,
        )
        payload = message.model_dump_json()
        refusal = Refusal(
            event_id=event_id, user=user, text=message.text[:REFUSAL_TEXT], at=self.store.clock()
        )
        kept = await self._keep(
            key, event_id, payload, create=create, user=user, take=take, refusal=refusal
        )
        if kept is Kept.KEPT:
            if len(self._requesters) >= REQUESTERS_KEPT:  # kept here, served elsewhere
                self._requesters.pop(next(iter(self._requesters)))
            self._requesters[key] = user
        return kept

    async def _ask_stop(self, key: ConversationKey, user: str) -> Kept | None:
        """The reply `stop`: a request to the run in progress, refused privately to whoever
        may not stop it (and then neither kept nor given to the model); None when nothing
        runs there, and it is an ordinary message."""
        record = await self.io(self.store.get, key)
        if record is None:
            if await self._expired_for(key, user):  # the thread is told, not the model
                return await self._keep_probe(key, user, "stop", take=True)
            return None
        stopping = await self._stop(record, user)
        if stopping.accepted:  # served by whoever holds the thread (us, if we took it)
            return Kept.KEPT if key in self._taken else Kept.STOPPING
        if stopping.refused:
            text = f"{stopping.text} Your `stop` was not passed on to it."
            self._emit_later([Refused(key=key, text=text, user=user)])
            return Kept.STOP_REFUSED
        if stopping.full:  # told privately: as a message it would be refused the same way
            self._emit_later([Refused(key=key, text=stopping.text, user=user)])
            return Kept.STOP_REFUSED
        return None

    async def _keep(
        self,
        key: ConversationKey,
        event_id: str,
        payload: str,
        *,
        create: bool,
        user: str | None,
        take: bool,
        stop_by: str | None = None,
        refusal: Refusal | None = None,
    ) -> Kept:
        """Keep one inbox entry; `refusal` says what to record, and tell the thread, if the
        backlog is full (a message; a stop is told privately instead)."""
        try:
            with self.keeps.keeping():
                kept = await self.io.urgent(
                    self.store.keep,
                    key,
                    event_id,
                    payload,
                    create=create,
                    participant=user or None,
                    owner=new_owner(self.process) if take and not self.draining else None,
                    token=uuid.uuid4().hex,
                    stop_by=stop_by,
                    refusal_text=refusal.text if refusal else "",
                )
        except NotFound:
            return Kept.NOT_OURS
        if kept.lease is not None and kept.record is not None:
            self._taken[key] = (kept.lease, kept.record)
        if kept.refused:
            if refusal is not None:
                self.not_taken.add(key, refusal, named=kept.named)
            return Kept.NOT_TAKEN
        return Kept.KEPT if kept.kept else Kept.DUPLICATE

    async def _keep_probe(
        self, key: ConversationKey, user: str, reason: str, *, take: bool
    ) -> Kept:
        """A request about a thread whose state expired: it brings the thread back, to be
        told (see `expiry`)."""
        payload = Probe(user=user, reason=reason).model_dump_json()
        event_id = f"probe:{reason}:{user}:{uuid.uuid4().hex}"
        return await self._keep(key, event_id, payload, create=False, user=None, take=take)

    async def _expired_for(self, key: ConversationKey, user: str) -> bool:
        """The conversation's state expired, and `user` may act on it."""
        gone = await self.io(self.store.expired_record, key)
        return gone is not None and self.may_act(gone, user)

    def opens_conversation(self, key: ConversationKey) -> bool:
        """The message just kept took the thread, and nothing has happened in its
        conversation yet: it is the conversation's first request."""
        taken = self._taken.get(key)
        return taken is not None and taken[1].next_seq == 0 and taken[1].checkpoint is None

    async def waiting_for(self, person: PersonKey) -> list[Waiting]:
        """The approvals `person` may decide (see `waiting`)."""
        return await waiting_for(self, person)

    async def serve(self, key: ConversationKey) -> list[Outcome]:
        """Serve the thread if it is free (or taken for us when its message was kept); if
        another holder has it, that holder reads the inbox before it lets go (and a dead
        holder's thread is picked up by `recover`)."""
        await self.keeps.settled()  # the burst's other messages are acknowledged first
        taken = self._taken.pop(key, None)
        person = self._requesters.pop(key, None)
        if self.draining:
            if taken is not None:  # give it up at once: the next process serves it
                await self.io(self.store.release, taken[0], status=Status.RUNNING, touch=False)
            return []  # kept already; the next process serves it
        slot = self.admission.try_take(person)
        if slot is None:  # every slot is taken: the thread waits, without its lease
            metrics.QUEUED.inc()
            if taken is not None:
                await self._give_up(taken[0])
            return await self.serve_when_admitted(key, person)
        with slot:
            if taken is not None and taken[0].expires_at > self.store.clock():
                lease, record = taken
            else:
                try:
                    lease, record = await self.io(
                        self.store.acquire, key, new_owner(self.process), create=False
                    )
                except LeaseBusy:
                    text = "Queued: I'll answer next."
                    return [Notice(key=key, kind=NoticeKind.QUEUED, text=text)]
                except NotFound:
                    return []
            serving = Serving(self, lease, record)
            outcomes = await self._serve(serving)
        if serving.yielded:  # it gave its slot to others waiting: back in line
            outcomes += await self.serve_when_admitted(key, person)
        return outcomes

    async def _give_up(self, lease: Lease) -> None:
        """Release a thread taken by its keep, as `running` with its inbox untouched: it
        waits durably, found by any replica's recovery (see `admission`)."""
        with contextlib.suppress(LeaseLost):  # another replica took it meanwhile
            await self.io(self.store.release, lease, status=Status.RUNNING, touch=False)

    async def serve_when_admitted(self, key: ConversationKey, person: str | None) -> list[Outcome]:
        """Wait for a slot (the thread says it is queued meanwhile), then serve the thread
        if it still has work and nobody else took it; again while it yields its slot."""
        outcomes: list[Outcome] = []
        while True:
            if not self.admission.waits(key):
                await shown(lambda: self.progress.queued(key, person))
            slot = await self.admission.take(key, person)
            if slot is None:  # it waits here already, or the replica is stopping
                return outcomes
            with slot:
                serving = await self._admitted(key)
                if serving is None:
                    return outcomes
                outcomes += await self._serve(serving)
            if not serving.yielded:
                return outcomes

    async def _admitted(self, key: ConversationKey) -> Serving | None:
        if self.draining:
            return None
        try:
            lease, record = await self.io(
                self.store.acquire, key, new_owner(self.process), create=False
            )
        except (LeaseBusy, NotFound):
            return None  # another replica with room serves it (or it is gone)
        if record.status is not Status.RUNNING:  # served meanwhile by another replica
            await self.io(self.store.release, lease, touch=False)
            return None
        return Serving(self, lease, record)

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

    async def keep_decision(
        self,
        key: ConversationKey,
        *,
        event_id: str,
        call_id: str,
        approve: bool,
        user: str,
        checkpoint_version: int,
        reason: str | None = None,
        request_message: str | None = None,
        reply_to: str | None = None,
        take: bool = False,
    ) -> Kept:
        """Keep a click on Approve or Reject durably; it never creates a conversation."""
        payload = DecisionRequest(
            call_id=call_id,
            approve=approve,
            user=user,
            version=checkpoint_version,
            reason=clean_text(reason) if reason else None,
            request_message=request_message,
            reply_to=reply_to,
        ).model_dump_json()
        return await self._keep(key, event_id, payload, create=False, user=None, take=take)

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
        decisions by someone not allowed, change nothing and are answered (`Refused`)."""
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

    # -- requests about a thread --------------------------------------------------------

    async def request_stop(
        self, key: ConversationKey, user: str, *, reply_to: str | None = None
    ) -> Stopping:
        """Ask the run in progress to stop (the Stop control): honoured for the person who
        started the run, approvers and admins (see `stopping`). `reply_to` answers the
        person later, when it had already finished."""
        stopping = await self.keep_stop(key, user, reply_to=reply_to)
        if stopping.serve:
            await self.serve(key)
        return stopping

    async def keep_stop(
        self, key: ConversationKey, user: str, *, reply_to: str | None = None
    ) -> Stopping:
        """`request_stop`'s durable half, for a caller that acknowledges a request in
        between: the stop is kept (or refused) when this returns; `Stopping.serve` says the
        write took the thread (a paused run, or an expired thread to be told), for the caller
        to `serve` next."""
        record = await self.io(self.store.get, key)
        if record is None:
            if await self._expired_for(key, user):
                kept = await self._keep_probe(key, user, "stop", take=True)
                return Stopping(False, EXPIRED_STOP, serve=kept is Kept.KEPT)
            return Stopping(False, "There is nothing of yours running there.")
        stopping = await self._stop(record, user, reply_to=reply_to)
        if stopping.accepted and key in self._taken:  # the run was paused: stop it now
            return Stopping(True, stopping.text, serve=True)
        return stopping

    async def _stop(
        self, record: Conversation, user: str, *, reply_to: str | None = None
    ) -> Stopping:
        """Keep the request in the thread's inbox, flagged on the record in the same write
        (see `stopping`); this process's own serve of the thread learns it at once, another
        replica's within `STOP_POLL`. When the thread was free (a run paused for approval)
        the write takes it, for the caller to serve."""
        key = record.key
        cutoff = self.store.takeover_cutoff(self.store.clock())
        if not (record.leased(cutoff) or record.status in STOPPABLE):
            return Stopping(False, "Nothing is running there right now.")
        if not self.may_stop(record, user):
            return Stopping(False, NOT_YOURS_TO_STOP, refused=True)
        payload = StopRequest(user=user, reply_to=reply_to).model_dump_json()
        event_id = f"stop:{user}:{uuid.uuid4().hex}"
        kept = await self._keep(
            key, event_id, payload, create=False, user=None, take=True, stop_by=user
        )
        if kept is Kept.NOT_OURS:
            return Stopping(False, "Nothing is running there right now.")
        if kept is Kept.NOT_TAKEN:
            return Stopping(
                False, "Too many messages are waiting in that thread; try again.", full=True
            )
        serving = self._live.get(key)  # after the keep: the stop it applies consumes it
        if serving is not None and serving.keeper is not None:
            serving.keeper.ask_stop(user)
        return Stopping(True, "Stopping it now.")

    async def resume(self, key: ConversationKey, *, user: str | None = None) -> list[Outcome]:
        """`/resume`: continue a paused or interrupted conversation, or say why not. Anyone
        who may not act on it gets the same answer whether or not it exists."""
        found = await self.io(self.store.get, key)
        if found is None and user is not None and await self._expired_for(key, user):
            if await self._keep_probe(key, user, "resume", take=True) is Kept.KEPT:
                await self.serve(key)  # the thread is told
            return [StatusReply(key=key, text=EXPIRED_RESUME)]
        if found is None or (user is not None and not self.may_act(found, user)):
            return [StatusReply(key=key, text=NEUTRAL)]
        try:
            lease, record = await self.io(
                self.store.acquire, key, new_owner(self.process), create=False
            )
        except LeaseBusy:
            return [StatusReply(key=key, text="It is running right now.")]
        except NotFound:
            return [StatusReply(key=key, text=NEUTRAL)]
        if record.status in (Status.RUNNING, Status.INTERRUPTED):
            return await self._serve(Serving(self, lease, record))
        if record.status is Status.AWAITING_APPROVAL:
            return await self._serve(Serving(self, lease, record, remind=True))
        await self.io(self.store.release, lease, touch=False)
        why = {
            Status.IDLE: "There is nothing to resume: the last run finished.",
            Status.NEEDS_RESTART: "The saved state was not trustworthy and was set aside; "
            "send a new message to start over.",
            Status.DISCARDED: "An admin discarded this conversation's state; "
            "send a new message to start over.",
        }
        return [StatusReply(key=key, text=why.get(record.status, "There is nothing to resume."))]

    # -- operators ----------------------------------------------------------------------

    async def discard(
        self, key: ConversationKey, *, by: str | None, only_if: StaleFilter | None = None
    ) -> list[Outcome]:
        """Admin: set the conversation's saved state aside (see `stewardship`)."""
        return await discard_conversation(self, key, by=by, only_if=only_if)

    async def discard_team(
        self, team: str | None, *, enterprise: str | None = None
    ) -> list[ConversationKey]:
        """A workspace removed the app: discard each of its conversations that could still
        run or resume (see `stewardship`)."""
        return await discard_team(self, team, enterprise)

    async def recover(self, *, limit: int = 1000) -> list[Outcome]:
        """Resume conversations whose holder died (see `recovery`)."""
        return await recover_conversations(self, limit=limit)

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

    def _continue_waiting(self, keys: Sequence[ConversationKey]) -> None:
        """MCP servers that paused these threads are back: continue each one that is still
        interrupted (in the background, like a recovery)."""
        if self.draining:
            return
        for key in keys:
            task = asyncio.create_task(self._continue(key))
            self._emitting.add(task)
            task.add_done_callback(self._emitting.discard)

    async def _continue(self, key: ConversationKey) -> None:
        for _ in range(CONTINUE_WAIT_STEPS):  # the serve that paused it lets go first
            if key not in self._live:
                break
            await asyncio.sleep(0.1)
        try:
            lease, record = await self.io(
                self.store.acquire, key, new_owner(self.process), create=False
            )
        except (LeaseBusy, NotFound):
            return  # someone serves it (and continues it), or it is gone
        except Exception:
            log.warning("%s: could not continue it after its MCP servers came back", key)
            return
        if record.status is not Status.INTERRUPTED or self.draining:
            await self.io(self.store.release, lease, touch=False)
            return
        log.info("%s: its MCP servers are back; continuing", key)
        try:
            await self._serve(Serving(self, lease, record))
        except Exception:
            log.exception("%s: continuing after the MCP servers came back failed", key)

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

    # -- checkpoint metadata ------------------------------------------------------------

    def meta(self, *, finished: bool = False) -> CheckpointMeta:
        return CheckpointMeta(
            schema_version=CURRENT_SCHEMA_VERSION,
            agent_fingerprint=self.fingerprint,
            finished=finished,
        )

    def _emit_later(self, outcomes: Sequence[Outcome]) -> None:
        """Deliver outcomes after the request that caused them is acknowledged."""
        task = asyncio.create_task(self.emit(outcomes))
        self._emitting.add(task)
        task.add_done_callback(self._emitting.discard)

    async def emit(self, outcomes: Sequence[Outcome]) -> None:
        """Deliver outcomes that are not recorded anywhere (best effort)."""
        from bot.runtime.delivery import Outbox

        outbox = Outbox(self.sink, self.store.clock)
        for outcome in outcomes:
            await outbox.emit_now(outcome)
