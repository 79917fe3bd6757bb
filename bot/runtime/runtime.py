"""The conversation runtime: start, resume, approve, discard, recover. Slack-agnostic.

One lease per thread; while it is held, one `_Work` serves the thread until nothing is left
to do: queued messages, a decision, or a run to continue. Every model turn ends in one atomic
commit of the checkpoint, the session items of the turn and the inbox entries it consumed."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from agents import Agent, RunConfig, RunState, TResponseInputItem
from agents.exceptions import ModelBehaviorError, UserError
from agents.memory import SessionSettings
from agents.models.openai_provider import OpenAIProvider
from agents.run_state import CURRENT_SCHEMA_VERSION, SUPPORTED_SCHEMA_VERSIONS

from bot.runtime.closing import closing_outputs, unanswered_calls
from bot.runtime.envelope import AwaitingCall, Envelope, HeldMessage, UserMessage
from bot.runtime.fingerprint import agent_fingerprint
from bot.runtime.guard import CURRENT_SCOPE, TurnScope, guard_agent
from bot.runtime.outcomes import (
    Answer,
    ApprovalRequest,
    Decided,
    Discarded,
    Duplicate,
    Notice,
    NoticeKind,
    Outcome,
    PendingCall,
    Refused,
    from_outbox,
    to_outbox,
)
from bot.runtime.outcomes import Status as StatusReply
from bot.runtime.replies import parse_decision
from bot.runtime.turns import run_one_turn
from bot.settings import RuntimeSettings
from storage import (
    KEEP,
    CheckpointError,
    CheckpointMeta,
    Commit,
    Conversation,
    ConversationKey,
    ConversationSession,
    InboxChanged,
    InboxEntry,
    Lease,
    LeaseBusy,
    LeaseKeeper,
    LeaseLost,
    Status,
    Store,
)

log = logging.getLogger(__name__)
OutcomeSink = Callable[[Outcome], Awaitable[None]]


class Decision:
    """A button click: one call, approve or reject, by a user, against a checkpoint version."""

    def __init__(
        self,
        call_id: str,
        approve: bool,
        user: str,
        version: int,
        reason: str | None = None,
        request_message: str | None = None,
    ) -> None:
        self.call_id = call_id
        self.approve = approve
        self.user = user
        self.version = version
        self.reason = reason
        self.request_message = request_message


class FailClosed(Exception):
    """Saved state can't be trusted: run nothing from it, say so, restart from history."""

    def __init__(self, kind: NoticeKind, why: str) -> None:
        super().__init__(why)
        self.kind = kind
        self.why = why


class ConversationRuntime:
    def __init__(
        self,
        store: Store,
        agent: Agent[Any],
        settings: RuntimeSettings | None = None,
        *,
        on_outcome: OutcomeSink | None = None,
        owner: str | None = None,
        agent_version: str = "",
    ) -> None:
        self.store = store
        self.settings = settings or RuntimeSettings()
        self.agent = guard_agent(agent)
        self.fingerprint = agent_fingerprint(self.agent, agent_version)
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.on_outcome = on_outcome
        # A provider of our own reads OPENAI_API_KEY / OPENAI_BASE_URL when first used.
        self.run_config = RunConfig(
            model=self.settings.model,
            model_provider=OpenAIProvider(),
            tracing_disabled=not self.settings.tracing,
        )
        self.session_settings = SessionSettings(limit=self.settings.history_items)

    # -- operations ---------------------------------------------------------------------

    async def handle_message(
        self, key: ConversationKey, *, event_id: str, user: str, text: str, ts: str | None = None
    ) -> list[Outcome]:
        """A user's message in a thread: kept durably (deduplicated by event id), then served
        at once, or right after the run that holds the thread."""
        payload = UserMessage(user=user, text=text, ts=ts).model_dump_json()
        if not await self._call(self.store.enqueue, key, event_id, payload):
            return [Duplicate(key=key, event_id=event_id)]
        try:
            lease, record = await self._call(self.store.acquire, key, self.owner)
        except LeaseBusy:
            # The holder re-reads the inbox before it releases (`InboxChanged`), and a dead
            # holder's thread is picked up by `recover` once its lease expires.
            return [Notice(key=key, kind=NoticeKind.QUEUED, text="Queued: I'll answer next.")]
        return await self._serve(lease, record)

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
    ) -> list[Outcome]:
        """An approval decision from a button. Stale or duplicate decisions change nothing.
        `request_message` identifies the clicked message for the `Decided` outcome."""
        try:
            lease, record = await self._call(self.store.acquire, key, self.owner)
        except LeaseBusy:
            return [Refused(key=key, text="This conversation is busy; that request is stale.")]
        decision = Decision(call_id, approve, user, checkpoint_version, reason, request_message)
        return await self._serve(lease, record, decision=decision)

    async def resume(self, key: ConversationKey) -> list[Outcome]:
        """`/resume`: continue a paused or interrupted conversation, or say why not."""
        try:
            lease, record = await self._call(self.store.acquire, key, self.owner)
        except LeaseBusy:
            return [StatusReply(key=key, text="It is running right now.")]
        if record.status in (Status.RUNNING, Status.INTERRUPTED):
            return await self._serve(lease, record, resumed=True)
        if record.status is Status.AWAITING_APPROVAL:
            return await self._serve(lease, record, remind=True)
        await self._call(self.store.release, lease)
        why = {
            Status.IDLE: "There is nothing to resume: the last run finished.",
            Status.NEEDS_RESTART: "The saved state was not trustworthy and was set aside; "
            "send a new message to start over.",
            Status.DISCARDED: "An admin discarded this conversation's state; "
            "send a new message to start over.",
        }
        return [StatusReply(key=key, text=why.get(record.status, "There is nothing to resume."))]

    async def discard(self, key: ConversationKey, *, by: str) -> list[Outcome]:
        """Admin: delete the checkpoint, take and release the lease, drop queued messages,
        mark the conversation discarded; keep the session history."""
        if await self._call(self.store.get, key) is None:
            return [Refused(key=key, text="There is no conversation in that thread.")]
        lease, record = await self._call(self.store.acquire, key, self.owner, force=True)
        pending = await self._unanswered(key)
        inbox = await self._call(self.store.read_inbox, key)
        closing = closing_outputs([{"call_id": call.call_id} for call in pending])
        await self._call(
            self.store.apply,
            Commit(
                key=key,
                lease=lease,
                items=closing,
                checkpoint=None,
                expected_version=record.checkpoint_version,
                status=Status.DISCARDED,
                release=True,
                consume=[entry.entry_id for entry in inbox],
            ),
        )
        if record.checkpoint:
            await self._call(self.store.delete_checkpoint, record.checkpoint)
        summary = Discarded(
            key=key,
            removed_checkpoint=record.checkpoint.object_key if record.checkpoint else None,
            pending_calls=pending,
            dropped_messages=len(inbox),
            previous_status=record.status.value,
        )
        lost = _describe_pending(pending) if pending else "No tool call was pending."
        notice = Notice(
            key=key,
            kind=NoticeKind.DISCARDED,
            text=f"An admin (<@{by}>) discarded this conversation's saved state. {lost} "
            "The history is kept; send a new message to start over.",
        )
        outcomes: list[Outcome] = [summary, notice]
        await self._emit_all(outcomes)
        return outcomes

    async def stale(self, older_than: timedelta, *, limit: int = 500) -> list[Conversation]:
        """Paused, interrupted or set-aside conversations idle for longer than `older_than`."""
        found: list[Conversation] = []
        for status in (Status.AWAITING_APPROVAL, Status.INTERRUPTED, Status.NEEDS_RESTART):
            found += await self._call(
                self.store.list_by_status, status, idle_for=older_than, limit=limit
            )
        return found

    async def recover(self) -> list[Outcome]:
        """Resume every conversation whose process died mid-run (status running, lease
        expired or absent), each once across replicas, with bounded concurrency."""
        running = await self._call(self.store.list_by_status, Status.RUNNING, limit=10_000)
        now = self.store.clock()
        orphans = [r for r in running if r.lease_expires_at is None or r.lease_expires_at < now]
        gate = asyncio.Semaphore(self.settings.recovery_concurrency)

        async def recover_one(record: Conversation) -> list[Outcome]:
            async with gate:
                try:
                    lease, fresh = await self._call(self.store.acquire, record.key, self.owner)
                except LeaseBusy:
                    return []  # another replica has it
                if fresh.status is not Status.RUNNING:
                    await self._call(self.store.release, lease)
                    return []  # finished meanwhile by another replica
                return await self._serve(lease, fresh, recovering=True)

        results = await asyncio.gather(*(recover_one(r) for r in orphans))
        return [outcome for outcomes in results for outcome in outcomes]

    # -- serving a held thread ----------------------------------------------------------

    async def _serve(
        self,
        lease: Lease,
        record: Conversation,
        *,
        decision: Decision | None = None,
        recovering: bool = False,
        resumed: bool = False,
        remind: bool = False,
    ) -> list[Outcome]:
        work = _Work(self, lease, record, recovering=recovering, remind=remind)
        async with LeaseKeeper(self.store, lease) as keeper:
            work.keeper = keeper
            try:
                while True:
                    await work.step(decision)
                    decision = None
                    try:
                        # A failed delivery keeps the thread `running` and undelivered, so
                        # the next recovery sweep sends its outcomes again.
                        failed = work.delivery_failed
                        await self._call(
                            self.store.release,
                            work.lease,
                            status=Status.RUNNING if failed else work.final_status,
                            inbox_seen=work.inbox_seen,
                            delivered=not failed,
                        )
                        break
                    except InboxChanged:
                        fresh = await self._call(self.store.get, record.key)
                        assert fresh is not None
                        work.record = fresh
            except LeaseLost:
                log.warning("lost the lease on %s; another process continues", record.key)
        return work.outcomes

    # -- helpers ------------------------------------------------------------------------

    async def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Storage calls block: run them off the event loop."""
        return await asyncio.to_thread(function, *args, **kwargs)

    async def _emit_all(self, outcomes: Sequence[Outcome]) -> None:
        if self.on_outcome:
            for outcome in outcomes:
                await self.on_outcome(outcome)

    async def _unanswered(self, key: ConversationKey) -> list[PendingCall]:
        """Calls in the history tail that never got an output: what a set-aside run lost."""
        page = await self._call(self.store.read_items, key, self.settings.history_items)
        return [
            PendingCall(
                call_id=call["call_id"],
                tool_name=call.get("name", ""),
                arguments=call.get("arguments", ""),
            )
            for call in unanswered_calls(page.items)
        ]

    def meta(self) -> CheckpointMeta:
        return CheckpointMeta(
            schema_version=CURRENT_SCHEMA_VERSION, agent_fingerprint=self.fingerprint
        )

    def verify(self, record: Conversation) -> None:
        """Before loading: is this checkpoint ours, current enough, and of a known schema?"""
        pointer = record.checkpoint
        assert pointer is not None
        age = self.store.clock() - pointer.created_at
        if age > self.store.state_ttl:
            raise FailClosed(
                NoticeKind.STATE_EXPIRED,
                f"it is {_human_age(age)} old, older than the limit of "
                f"{_human_age(self.store.state_ttl)}",
            )
        if pointer.schema_version not in SUPPORTED_SCHEMA_VERSIONS:
            raise FailClosed(
                NoticeKind.STATE_INCOMPATIBLE,
                f"it was written in run-state schema {pointer.schema_version}, which this "
                "version of the bot cannot read",
            )
        if pointer.agent_fingerprint != self.fingerprint:
            raise FailClosed(
                NoticeKind.STATE_INCOMPATIBLE,
                "the agent changed since it was saved (its tools or instructions differ)",
            )


class _Work:
    """One lease-holding session of serving a thread."""

    def __init__(
        self,
        runtime: ConversationRuntime,
        lease: Lease,
        record: Conversation,
        *,
        recovering: bool,
        remind: bool,
    ) -> None:
        self.rt = runtime
        self.store = runtime.store
        self.key = record.key
        self.record = record
        self.version = record.checkpoint_version
        self.initial_lease = lease
        self.keeper: LeaseKeeper | None = None
        self.outcomes: list[Outcome] = []
        self.final_status: Status = Status.IDLE
        self.recovering = recovering
        self.remind = remind
        self.emitted_version = -1  # checkpoint version whose outbox this serve emitted
        self.delivery_failed = False

    @property
    def lease(self) -> Lease:
        return self.keeper.lease if self.keeper else self.initial_lease

    @property
    def inbox_seen(self) -> int:
        return self.record.inbox_seq

    async def emit(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)
        try:
            await self.rt._emit_all([outcome])
        except Exception:
            log.exception("%s: delivering %s failed", self.key, type(outcome).__name__)
            self.delivery_failed = True

    def check(self) -> None:
        if self.keeper:
            self.keeper.check()

    # -- one pass over what the thread has ----------------------------------------------

    async def step(self, decision: Decision | None) -> None:
        self.check()
        self.version = self.record.checkpoint_version
        inbox = await self.rt._call(self.store.read_inbox, self.key)
        current = await self._current_envelope()
        undelivered = (
            current is not None
            and bool(current.outbox)
            and self.record.delivered_version < self.version
            and self.emitted_version != self.version
        )
        envelope = current if current is not None and not current.finished else None
        if self.recovering and (envelope is not None or inbox or undelivered):
            self.recovering = False
            await self.emit(
                Notice(
                    key=self.key,
                    kind=NoticeKind.RESUMED_AFTER_RESTART,
                    text="I was interrupted (a restart or a failed delivery); "
                    "resuming where I left off.",
                )
            )
        if current is not None and undelivered:
            # Committed, but the process died before its outcomes reached the user.
            self.emitted_version = self.version
            for entry in current.outbox:
                await self.emit(from_outbox(entry))
        if envelope is not None and envelope.humans:
            await self._while_awaiting(envelope, inbox, decision)
            return
        if decision is not None:
            await self.emit(Refused(key=self.key, text="That approval is no longer pending."))
        messages, unreadable = _read_messages(inbox)
        consume = [entry.entry_id for entry in inbox]
        arrived = [HeldMessage(user=m.user, text=m.text, event_id="") for m in messages]
        if envelope is not None:  # a run to continue (after a restart, or `/resume`)
            state = await self._load_state(envelope)
            if state is not None:
                # New messages wait in the envelope (durably) until this run finishes.
                held = envelope.held + arrived
                await self._drive(state, envelope.started_by, held, consume)
                return
            envelope = None
        if current is not None and current.finished and current.held:
            # Died between finishing a run and starting the one its held messages begin.
            held = current.held + arrived
            await self._drive(_as_input(held), held[0].user, [], consume)
            return
        decisions = [m for m in messages if parse_decision(m.text) is not None]
        fresh = [m for m in messages if parse_decision(m.text) is None]
        if fresh:
            held = [HeldMessage(user=m.user, text=m.text, event_id="") for m in fresh]
            await self._drive(_as_input(held), fresh[0].user, [], consume)
            return
        if consume:  # only stray decision words or unreadable payloads: answer, consume
            await self._consume_only(consume)
            if decisions:
                await self.emit(
                    StatusReply(key=self.key, text="There is no pending approval to decide.")
                )
        if unreadable:
            log.error("%s: %d unreadable inbox entries dropped", self.key, unreadable)
        self.final_status = (
            self.record.status
            if self.record.status in (Status.NEEDS_RESTART, Status.DISCARDED, Status.INTERRUPTED)
            and not consume
            else Status.IDLE
        )

    # -- awaiting a person --------------------------------------------------------------

    async def _while_awaiting(
        self, envelope: Envelope, inbox: list[InboxEntry], decision: Decision | None
    ) -> None:
        decisions: dict[str, tuple[bool, str, str | None]] = {}
        if decision is not None:
            refusal = self._check_decision(envelope, decision)
            if refusal:
                await self.emit(Refused(key=self.key, text=refusal))
            else:
                decisions[decision.call_id] = (decision.approve, decision.user, decision.reason)
        messages, _ = _read_messages(inbox)
        held = list(envelope.held)
        for message in messages:
            verdict = parse_decision(message.text)
            if verdict is not None and self._allowed(envelope, message.user):
                for call in envelope.humans:
                    decisions.setdefault(call.call_id, (verdict, message.user, None))
            else:
                held.append(HeldMessage(user=message.user, text=message.text, event_id=""))
        consume = [entry.entry_id for entry in inbox]
        undecided = [c for c in envelope.humans if c.call_id not in decisions]
        if decisions and not undecided:
            state = await self._load_state(envelope)
            if state is None:
                return
            _apply_decisions(state, decisions)
            decided: list[Outcome] = [
                Decided(
                    key=self.key,
                    call_id=call.call_id,
                    tool_name=call.tool_name,
                    arguments=call.arguments,
                    request_message=(
                        decision.request_message
                        if decision is not None and decision.call_id == call.call_id
                        else None
                    ),
                    approved=decisions[call.call_id][0],
                    user=decisions[call.call_id][1],
                    reason=decisions[call.call_id][2],
                )
                for call in envelope.humans
            ]
            # The decision is durable before anything runs: a crash from here on is
            # recovered from this checkpoint (status `running`), not asked again.
            approved = envelope.model_copy(
                update={"run_state": state.to_json(), "held": held, "awaiting": []}
            )
            await self._commit(approved, consume=consume, outbox=decided, then_continue=True)
            await self._drive(state, envelope.started_by, held, [])
            return
        changed = bool(consume) or bool(decisions)
        if changed:
            # Keep what arrived (and any partial decision) in a new checkpoint; the question
            # is asked again with that checkpoint's version.
            state_doc = envelope.run_state
            if decisions:
                state = await self._load_state(envelope)
                if state is None:
                    return
                _apply_decisions(state, decisions)
                state_doc = state.to_json()
            kept = envelope.model_copy(
                update={
                    "run_state": state_doc,
                    "held": held,
                    "awaiting": [
                        c for c in envelope.awaiting if not c.human or c.call_id not in decisions
                    ],
                }
            )
            outbox: list[Outcome] = []
            if len(held) > len(envelope.held):
                outbox.append(
                    Notice(
                        key=self.key,
                        kind=NoticeKind.MESSAGE_KEPT,
                        text="I kept your message and will answer it once the pending "
                        "approval is decided.",
                    )
                )
            outbox.append(self._approval_request(kept, reminder=True, version=self.version + 1))
            await self._commit(kept, consume=consume, outbox=outbox)
        elif self.remind:
            await self.emit(self._approval_request(envelope, reminder=True))
        self.final_status = Status.AWAITING_APPROVAL

    def _check_decision(self, envelope: Envelope, decision: Decision) -> str | None:
        if decision.version != self.version:
            return "This approval request is out of date; use the newest one in the thread."
        if decision.call_id not in {c.call_id for c in envelope.humans}:
            return "That call is not waiting for a decision."
        if not self._allowed(envelope, decision.user):
            return "Only the person who started this run, or an approver, can decide."
        return None

    def _allowed(self, envelope: Envelope, user: str) -> bool:
        return user == envelope.started_by or user in self.rt.settings.approvers

    def _approval_request(
        self, envelope: Envelope, *, reminder: bool, version: int | None = None
    ) -> ApprovalRequest:
        calls = [PendingCall(**c.model_dump(exclude={"human"})) for c in envelope.humans]
        return ApprovalRequest(
            key=self.key,
            calls=calls,
            checkpoint_version=self.version if version is None else version,
            requested_by=envelope.started_by,
            reminder=reminder,
        )

    # -- loading and failing closed -----------------------------------------------------

    async def _current_envelope(self) -> Envelope | None:
        """The checkpoint's envelope, verified; None when there is none, or when the
        checkpoint was set aside (a notice says so)."""
        if self.record.checkpoint is None:
            return None
        failure: FailClosed | None = None
        try:
            self.rt.verify(self.record)
        except FailClosed as refused:
            failure = refused  # still read it below, to say what is lost
        envelope: Envelope | None = None
        try:
            document = await self.rt._call(self.store.load_checkpoint, self.record.checkpoint)
            envelope = Envelope.model_validate(document)
        except CheckpointError as exc:
            failure = failure or FailClosed(
                NoticeKind.STATE_DAMAGED, f"it is {exc.reason} ({exc.detail})"
            )
        except ValueError as exc:
            failure = failure or FailClosed(
                NoticeKind.STATE_DAMAGED, f"it could not be read ({exc})"
            )
        if envelope is not None and envelope.finished and failure is not None:
            return None  # nothing was left to continue: the next run starts fresh anyway
        if failure is not None or envelope is None:
            await self._fail_closed(
                failure or FailClosed(NoticeKind.STATE_DAMAGED, "it is unreadable"),
                envelope if envelope is not None and not envelope.finished else None,
            )
            return None
        return envelope

    async def _load_state(self, envelope: Envelope) -> RunState[Any] | None:
        try:
            return await RunState.from_json(self.rt.agent, envelope.run_state)
        except (UserError, ModelBehaviorError, ValueError, KeyError, TypeError) as exc:
            await self._fail_closed(
                FailClosed(NoticeKind.STATE_INCOMPATIBLE, f"the SDK refused it ({exc})"),
                envelope,
            )
            return None

    async def _fail_closed(self, failure: FailClosed, envelope: Envelope | None) -> None:
        """Run nothing; set the checkpoint aside; close unanswered tool calls in the history
        so that it stays valid for the model; say what was lost and why."""
        unanswered = await self.rt._unanswered(self.key)
        closing = closing_outputs([{"call_id": call.call_id} for call in unanswered])
        # What a person was asked to approve, or else every call the history left open.
        pending = [
            PendingCall(**c.model_dump(exclude={"human"}))
            for c in (envelope.humans if envelope else [])
        ] or unanswered
        pointer = self.record.checkpoint
        await self.rt._call(
            self.store.apply,
            Commit(
                key=self.key,
                lease=self.lease,
                items=closing,
                checkpoint=None,
                expected_version=self.version,
                status=Status.NEEDS_RESTART,
            ),
        )
        self.version = 0
        self.record = self.record.model_copy(
            update={"checkpoint": None, "status": Status.NEEDS_RESTART}
        )
        self.final_status = Status.NEEDS_RESTART
        if pointer:
            await self.rt._call(self.store.delete_checkpoint, pointer)
        lost = _describe_pending(pending) if pending else "The run in progress was stopped."
        await self.emit(
            Notice(
                key=self.key,
                kind=failure.kind,
                text=f"I can't safely continue from the saved state: {failure.why}. "
                f"Nothing from it was run again. {lost} The history up to the last completed "
                "step is kept; your next message starts a fresh run.",
            )
        )

    # -- driving a run ------------------------------------------------------------------

    async def _drive(
        self,
        start: str | list[TResponseInputItem] | RunState[Any],
        started_by: str,
        held: list[HeldMessage],
        consume: list[str],
    ) -> None:
        """Run turn by turn, committing after each, until it pauses, finishes, or fails."""
        rt = self.rt
        session = ConversationSession(
            self.store,
            self.key,
            lease=self.lease,
            staged=True,
            session_settings=rt.session_settings,
        )
        from_checkpoint = isinstance(start, RunState)
        scope = TurnScope(store=self.store, lease=self.lease)
        token = CURRENT_SCOPE.set(scope)
        try:
            while True:
                self.check()
                scope.human_approval.clear()
                scope.unknown_outcomes.clear()
                try:
                    result = await run_one_turn(
                        rt.agent,
                        start,
                        session=session,
                        run_config=rt.run_config,
                        max_turns=rt.settings.max_turns,
                    )
                except (UserError, ModelBehaviorError) as exc:
                    session.discard_pending()
                    if from_checkpoint:
                        await self._fail_closed(
                            FailClosed(
                                NoticeKind.STATE_INCOMPATIBLE, f"the SDK refused it ({exc})"
                            ),
                            None,
                        )
                        return
                    await self._interrupted(exc, consume)
                    return
                except LeaseLost:
                    raise
                except Exception as exc:
                    session.discard_pending()
                    await self._interrupted(exc, consume)
                    return
                self.check()
                outbox: list[Outcome] = [
                    Notice(
                        key=self.key,
                        kind=NoticeKind.TOOL_OUTCOME_UNKNOWN,
                        text=f"`{tool_name}` (call {call_id}) was started before a restart "
                        "and its outcome is unknown. It was not run again.",
                    )
                    for call_id, tool_name in scope.unknown_outcomes
                ]
                state = result.to_state()
                awaiting = [
                    AwaitingCall(
                        call_id=item.call_id or "",
                        tool_name=item.name or "",
                        arguments=item.arguments or "",
                        human=scope.human_approval.get(item.call_id or "", True),
                    )
                    for item in result.interruptions
                ]
                for item in state.get_interruptions():
                    if not scope.human_approval.get(item.call_id or "", True):
                        state.approve(item)  # checkpointed below, before the call runs
                humans = [call for call in awaiting if call.human]
                finished = result.final_output is not None and not awaiting
                envelope = Envelope(
                    run_state=state.to_json(),
                    started_by=started_by,
                    awaiting=humans,
                    held=held,
                    finished=finished,
                )
                if humans:
                    outbox.append(
                        self._approval_request(envelope, reminder=False, version=self.version + 1)
                    )
                if finished:
                    outbox.append(Answer(key=self.key, text=str(result.final_output)))
                final = bool(humans) or (finished and not held)
                await self._commit(
                    envelope,
                    consume=consume,
                    session=session,
                    outbox=outbox,
                    then_continue=not final,
                )
                consume = []
                from_checkpoint = False
                if humans:
                    self.final_status = Status.AWAITING_APPROVAL
                    return
                if finished:
                    if not held:
                        self.final_status = Status.IDLE
                        return
                    start, started_by, held = _as_input(held), held[0].user, []
                    continue
                start = state
        finally:
            CURRENT_SCOPE.reset(token)

    async def _commit(
        self,
        envelope: Envelope,
        *,
        consume: list[str],
        outbox: list[Outcome],
        session: ConversationSession | None = None,
        then_continue: bool = False,
    ) -> None:
        """Commit the checkpoint with the turn's session items, consuming inbox entries, then
        emit its outcomes. The status stays `running` until the release that records their
        delivery, so a crash in between is found by `recover` and they are sent again."""
        envelope.outbox = [to_outbox(outcome) for outcome in outbox]
        done = await self.rt._call(
            self.store.commit,
            self.lease,
            state=envelope.document(),
            meta=self.rt.meta(),
            expected_version=self.version,
            items=session.pending if session else (),
            base_seq=session.base_seq if session else None,
            status=Status.RUNNING,
            consume=consume,
        )
        assert done.checkpoint is not None
        self.version = done.checkpoint.version
        self.record = self.record.model_copy(update={"checkpoint": done.checkpoint})
        if session is not None and done.next_seq is not None:
            session.committed(done.next_seq)
        self.emitted_version = self.version
        for outcome in outbox:
            await self.emit(outcome)
        if outbox and then_continue and not self.delivery_failed:
            # More work follows (tools, model calls): record the delivery now, so that a
            # crash during that work does not post these outcomes twice.
            await self.rt._call(
                self.store.apply,
                Commit(key=self.key, lease=self.lease, delivered=True, touch=False),
            )

    async def _consume_only(self, consume: list[str]) -> None:
        await self.rt._call(
            self.store.apply,
            Commit(key=self.key, lease=self.lease, consume=consume, checkpoint=KEEP),
        )

    async def _interrupted(self, exc: BaseException, consume: list[str]) -> None:
        """The run failed (model or API error, too many turns). The last checkpoint stays;
        `/resume` retries from it. Messages not yet consumed stay queued."""
        log.exception("%s: run failed", self.key, exc_info=exc)
        self.final_status = Status.INTERRUPTED
        await self.emit(
            Notice(
                key=self.key,
                kind=NoticeKind.RUN_FAILED,
                text=f"The run stopped: {type(exc).__name__}: {exc}. Nothing was lost; "
                "use /resume to try again.",
            )
        )


def _apply_decisions(
    state: RunState[Any], decisions: dict[str, tuple[bool, str, str | None]]
) -> None:
    """Record each decision (approve, deciding user, reason) on the run state."""
    for item in state.get_interruptions():
        if item.call_id in decisions:
            approve, _, reason = decisions[item.call_id]
            if approve:
                state.approve(item)
            else:
                state.reject(item, rejection_message=reason)


def _read_messages(inbox: list[InboxEntry]) -> tuple[list[UserMessage], int]:
    messages, unreadable = [], 0
    for entry in inbox:
        try:
            messages.append(UserMessage.model_validate_json(entry.payload))
        except ValueError:
            unreadable += 1
    return messages, unreadable


def _as_input(messages: list[HeldMessage]) -> str | list[TResponseInputItem]:
    if len(messages) == 1:
        return messages[0].text
    return [{"role": "user", "content": m.text} for m in messages]


def _describe_pending(pending: list[PendingCall]) -> str:
    names = ", ".join(f"`{call.tool_name}`" for call in pending)
    return f"Pending and not run: {names}."


def _human_age(age: timedelta) -> str:
    seconds = int(age.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
