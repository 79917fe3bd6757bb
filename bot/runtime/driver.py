"""Driving a run from checkpoint to checkpoint, with one atomic commit at each: before a
side-effecting call runs (the run pauses for it), when the run finishes, and after the turn
in progress once `checkpoint_interval` seconds of harmless work (model turns, retry-safe
tools: run again after a crash) have gone by without one, or the process is stopping.

After every commit the driver checks whether the process is shutting down: if so it stops
there (the thread is released as `running` and the next process continues from that very
checkpoint). Failures are sorted: a storage failure or a lost lease raised inside a tool is
re-raised as itself (the SDK must not turn it into a `UserError`); a run resumed from a
checkpoint that the SDK refuses fails closed; a model or API failure interrupts the run with
its checkpoint intact and a plain notice (details in the log, under the notice's reference).

Between two checkpoints the run is one `Runner.run_streamed` call (`run_turns`).
A turn whose tools are all harmless to run again (or that has none) needs no checkpoint of
its own: after a crash it is simply run again. A side-effecting call always pauses the run
before it runs (`guard`), which ends this call with the call waiting, to be checkpointed.
So the run goes on, turn after turn, until it pauses, finishes, or `checkpoint_due()` says
it has done enough since the last checkpoint (or the process is stopping): then
`cancel(mode="after_turn")` lets the turn in progress end (its tools still run) and stops
before the next model call. It is asked from the model's events (a cancel before the run's
first model call would stop a resumed run after the calls it resumes, before any turn).

Each model call (with the tools its turn runs) may take `time_limit`: the clock starts
again when the next one begins. A turn over it, or a caller cancelled (shutdown), stops the
SDK's run at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents import (
    Agent,
    RunConfig,
    Runner,
    RunResultStreaming,
    RunState,
    TResponseInputItem,
)
from agents.exceptions import (
    ModelBehaviorError,
    UserError,
)
from agents.memory import Session

from bot.runtime import applying_stops, approvals, state_checks
from bot.runtime.envelope import AwaitingCall, Envelope, HeldMessage, RunWindow
from bot.runtime.guardrail_trips import EndedRequest, guardrail_name, guardrail_tripped
from bot.runtime.mcp_failures import SEEN_DOWN, McpServerDown
from bot.runtime.mcp_servers import paused_for
from bot.runtime.model_window import RunView
from bot.runtime.outcomes import Answer, Notice, NoticeKind, Outcome
from bot.runtime.pass_results import AwaitsDecision, GivenBack, LeftAs, PassResult
from bot.runtime.progress import Step, shown
from bot.runtime.request_context import request_context, state_document
from bot.runtime.run_failures import interrupted
from bot.runtime.run_options import for_run
from bot.runtime.summaries import resumed_view
from bot.runtime.too_large import too_large
from bot.runtime.tool_failures import NoAnswer
from bot.runtime.turn_scope import CURRENT_SCOPE, TurnScope, Unanswered
from bot.runtime.window_refusals import is_context_refusal
from storage import ConversationSession, Status, StorageError

if TYPE_CHECKING:
    from bot.runtime.serving_view import ServingView, Start

log = logging.getLogger(__name__)
LATE_OUTPUT_CHARACTERS = 500
TEXT_DELTA = "response.output_text.delta"
TURN_BEGINS = "response.created"  # the first event of each model call


async def drive(
    serving: ServingView,
    start: Start,
    started_by: str,
    held: list[HeldMessage],
    consume: list[str],
    window: RunWindow | None = None,
) -> PassResult:
    """Run until it pauses for a person, finishes (then answer held messages), fails, or the
    process starts shutting down. `window`: what a run continued from its checkpoint was
    given of the history (`summaries`). Returns what the serve is left as."""
    parts = serving.parts
    session = _session(serving)
    from_checkpoint = isinstance(start, RunState)
    view = await resumed_view(serving, window) if from_checkpoint else RunView()
    scope = _scope(serving)
    await serving.begin_run(started_by)
    await serving.show_work(started_by)
    keeper = serving.keeper
    # Its renewals keep the state alive while the run goes on: set once the run has begun,
    # cleared whichever way the drive ends (`LeaseKeeper.working_turn`).
    with keeper.working_turn() if keeper is not None else contextlib.nullcontext():
        token = CURRENT_SCOPE.set(scope)
        seen_down: set[str] = set()  # MCP servers the turn found down (a nested agent's, too)
        seen_token = SEEN_DOWN.set(seen_down)
        try:
            while True:
                serving.check()
                if parts.draining:
                    return GivenBack()  # released as `running`: the next process continues
                if isinstance(start, list):  # a fresh run: what it is given of the history
                    opened = await serving.open_window(session, start, started_by)
                    view, window = opened.view, opened.window
                scope.reset()
                seen_down.clear()
                scope.lease = serving.lease
                session.lease = serving.lease
                if serving.stop_asked:
                    session.discard_pending()
                    return await applying_stops.stopped(serving, consume)
                turn = _Turn(serving, session, scope, seen_down, consume)
                result = await turn.run(
                    start, started_by, held, view, from_checkpoint=from_checkpoint
                )
                if not isinstance(result, RunResultStreaming):
                    return result
                ended = await turn.may_keep()
                if ended is not None:
                    return ended
                kept = _Kept.of(serving, scope, result, started_by, held, window)
                humans = [call for call in kept.awaiting if call.human]
                outcomes = _restart_notices(serving, scope)
                if humans:
                    outcomes.append(approvals.approval_request(serving, kept.envelope))
                if kept.envelope.finished:
                    outcomes.append(Answer(key=serving.key, text=str(result.final_output)))
                next_seq = await serving.commit(
                    kept.envelope,
                    consume=consume,
                    outcomes=outcomes,
                    items=session.pending,
                    base_seq=session.base_seq,
                    # Calls that need no person run next turn, unless one waits for a person:
                    # then they wait too, and are armed by the commit of the decision.
                    arm=[] if humans else [call for call in kept.awaiting if not call.human],
                )
                if next_seq is not None:
                    session.committed(next_seq)
                    parts.history.put(serving.record, session.known)
                consume = []
                from_checkpoint = False
                if humans:
                    for call in humans:
                        await scope.show(call.call_id, call.tool_name, Step.WAITING)
                    return AwaitsDecision(started_by)
                if kept.envelope.finished:
                    if not held:
                        return LeftAs(Status.IDLE)
                    start, started_by = await serving.input_for(held), held[0].user
                    held = []
                    await serving.begin_run(started_by)
                    continue
                assert kept.state is not None  # neither finished nor waiting for a person
                start = kept.state
        finally:
            SEEN_DOWN.reset(seen_token)
            CURRENT_SCOPE.reset(token)


def _session(serving: ServingView) -> ConversationSession:
    """The conversation's history for this serve: staged, so that a turn's items are written
    by its commit, together with the checkpoint."""
    parts = serving.parts
    return ConversationSession(
        serving.store,
        serving.key,
        lease=serving.lease,
        staged=True,
        session_settings=parts.session_settings,
        known=parts.history.get(serving.record),
        calls=parts.storage_calls,
    )


def _scope(serving: ServingView) -> TurnScope:
    """What the guarded tools of a turn see: the storage, the lease, the calls armed to run,
    where their steps are shown, and whether a stop was asked."""
    progress, key = serving.parts.progress, serving.key

    async def on_step(call_id: str, tool: str, state: Step) -> None:
        await progress.step(key, call_id, tool, state)

    return TurnScope(
        storage=serving.storage_calls,
        lease=serving.lease,
        armed=serving.armed_in_turn,
        on_step=on_step,
        stop_requested=lambda: serving.stop_asked,
        keyed_attempts=serving.parts.settings.idempotent_attempts,
    )


class _Turn:
    """One turn of the run, and how it ended when it did not end in a result to keep: the
    thread is then stopped, paused, told or set aside (`run` returns what the serve is
    left as), or a fault is raised as itself."""

    def __init__(
        self,
        serving: ServingView,
        session: ConversationSession,
        scope: TurnScope,
        seen_down: set[str],
        consume: list[str],
    ) -> None:
        self.serving = serving
        self.session = session
        self.scope = scope
        self.seen_down = seen_down
        self.consume = consume

    async def run(
        self,
        start: Start,
        started_by: str,
        held: list[HeldMessage],
        view: RunView,
        *,
        from_checkpoint: bool,
    ) -> RunResultStreaming | PassResult:
        serving, parts, key = self.serving, self.serving.parts, self.serving.key
        progress = parts.progress

        async def on_text(delta: str) -> None:
            await shown(lambda: progress.text(key, delta))

        interval = parts.settings.checkpoint_interval
        since = time.monotonic()

        def checkpoint_due() -> bool:
            return parts.draining or time.monotonic() - since >= interval

        turn = asyncio.create_task(
            run_turns(
                parts.agent,
                start,
                session=self.session,
                run_config=for_run(parts.run_config, key, started_by, view=view),
                max_turns=parts.settings.max_turns,
                time_limit=parts.settings.turn_timeout,
                on_text=on_text,
                context=request_context(key, started_by, serving.decided, serving.lease.generation),
                checkpoint_due=checkpoint_due,
            )
        )
        try:
            abandoned = await _stopped_first(serving, self.scope, turn)
        except asyncio.CancelledError:
            # A shutdown past its grace: the turn goes with the serve, so that its model
            # call does not go on once the thread is given up (the SDK shields a tool
            # already running: it finishes, and its result is recorded if it can be).
            turn.cancel()
            raise
        if abandoned:
            self.session.discard_pending()
            return await applying_stops.stopped(serving, self.consume)
        try:
            return await turn
        except Exception as exc:
            self.session.discard_pending()
            return await self._failed(
                exc,
                started_by,
                held,
                from_checkpoint=from_checkpoint,
                resumed=isinstance(start, RunState),  # its earlier turns are committed
            )

    async def _failed(
        self,
        exc: Exception,
        started_by: str,
        held: list[HeldMessage],
        *,
        from_checkpoint: bool,
        resumed: bool,
    ) -> PassResult:
        """Sort a turn's failure (see the module's docstring): what the serve is left as;
        re-raises the faults."""
        serving, scope = self.serving, self.scope
        if scope.fault is not None:
            await _tell_late(serving, scope)
            raise scope.fault from exc
        if isinstance(exc, StorageError):
            raise exc
        if isinstance(exc, McpServerDown) or self.seen_down:
            down = sorted(self.seen_down | set(getattr(exc, "servers", [])))
            return await paused_for(serving, down)
        ended = EndedRequest(started_by, held, self.consume, resumed)
        if guardrail_name(exc) is not None:
            return await guardrail_tripped(serving, exc, ended)
        if is_context_refusal(exc):
            return await too_large(serving, exc, ended)
        if from_checkpoint and isinstance(exc, UserError | ModelBehaviorError):
            log.error("%s: the SDK refused the saved run: %s", serving.key, exc)
            return await state_checks.fail_closed(
                serving,
                state_checks.FailClosed(NoticeKind.STATE_INCOMPATIBLE, "the SDK refused it"),
                None,
            )
        return await interrupted(serving, exc)

    async def may_keep(self) -> PassResult | None:
        """None when the turn that returned may be kept; else the thread was told why, and
        this is what the serve is left as (or a fault is raised)."""
        serving, scope = self.serving, self.scope
        if scope.fault is not None:
            await _tell_late(serving, scope)
            raise scope.fault
        if self.seen_down:  # e.g. an agent used as a tool could not list its MCP tools
            self.session.discard_pending()
            return await paused_for(serving, sorted(self.seen_down))
        serving.check()
        if serving.stop_asked:  # before anything of this turn is kept or posted
            self.session.discard_pending()
            return await applying_stops.stopped(serving, self.consume)
        return None


def _restart_notices(serving: ServingView, scope: TurnScope) -> list[Outcome]:
    """What the thread is told of the calls a restart cut short."""
    outcomes: list[Outcome] = []
    outcomes += [
        Notice(
            key=serving.key,
            kind=NoticeKind.TOOL_OUTCOME_UNKNOWN,
            text=f"`{tool_name}` (call {call_id}) was started before a restart and "
            "its outcome is unknown. It was not run again.",
        )
        for call_id, tool_name in scope.unknown_outcomes
    ]
    outcomes += [
        Notice(
            key=serving.key,
            kind=NoticeKind.TOOL_COMPLETED_AFTER_RESTART,
            text=f"`{tool_name}` (call {call_id}) was cut short by a restart; it was "
            "run again with the same idempotency key (so it takes effect once) and "
            + ("failed." if scope.fates.get(call_id) is Step.FAILED else "completed."),
        )
        for call_id, tool_name in scope.started_again
    ]
    across = _across_restart(scope)
    if across:
        outcomes.append(
            Notice(key=serving.key, kind=NoticeKind.TOOL_COMPLETED_AFTER_RESTART, text=across)
        )
    outcomes += [
        Notice(key=serving.key, kind=NoticeKind.TOOL_OUTCOME_UNKNOWN, text=_unanswered(call))
        for call in scope.unanswered
    ]
    return outcomes


def _across_restart(scope: TurnScope) -> str:
    """What became of the turn's side effects that a restart came between: those approved
    and not started before it, run now, and those that had run before it (said when another
    call of the turn was cut short, so that the thread knows of each what it did)."""
    said = [
        f"`{tool_name}` (call {call_id}) was approved before a restart and had not started; "
        f"it was run once after the restart{_ended(scope.fates.get(call_id))}"
        for call_id, tool_name in scope.started_late
    ]
    if said or scope.unknown_outcomes or scope.started_again:
        said += [
            f"`{tool_name}` (call {call_id}) had run before the restart; it was not run again."
            for call_id, tool_name in scope.ran_before
        ]
    return " ".join(said)


def _ended(fate: Step | None) -> str:
    if fate is Step.DONE:
        return " and completed."
    if fate is Step.FAILED:
        return " and failed."
    return "."  # no answer came: the notice that follows says so


def _unanswered(call: Unanswered) -> str:
    """What the thread is told of a call that got no answer."""
    if call.why is NoAnswer.TIMED_OUT:
        what = "did not answer in time"
    else:
        what = "stopped answering before it finished"
    if call.server is not None:
        sent = f"was sent to the `{call.server}` tools, which {what}"
    elif call.why is NoAnswer.TIMED_OUT:
        sent = f"was sent and {what}"
    else:
        sent = "was sent and lost its connection before it finished"
    return (
        f"`{call.tool}` (call {call.call_id}) {sent}: its outcome is unknown. It was not run again."
    )


@dataclass
class _Kept:
    """What a turn's commit keeps: the envelope, the calls it waits on, and the run state
    the next turn starts from (None once the run is finished)."""

    envelope: Envelope
    awaiting: list[AwaitingCall]
    state: RunState[Any] | None

    @classmethod
    def of(
        cls,
        serving: ServingView,
        scope: TurnScope,
        result: RunResultStreaming,
        started_by: str,
        held: list[HeldMessage],
        window: RunWindow | None,
    ) -> _Kept:
        awaiting = [
            AwaitingCall(
                call_id=item.call_id or "",
                tool_name=item.name or "",
                arguments=item.arguments or "",
                agent=approvals.asking_agent(item, serving.parts.agent),
                human=scope.human_approval.get(item.call_id or "", True),
                asked_at=serving.store.clock(),
            )
            for item in result.interruptions
        ]
        finished = result.final_output is not None and not awaiting
        # A finished run is never resumed: its checkpoint keeps no RunState (the history
        # is in the session), which spares serialising the whole run every turn.
        state = None if finished else result.to_state()
        if state is not None:
            for item in state.get_interruptions():
                if not scope.human_approval.get(item.call_id or "", True):
                    state.approve(item)  # checkpointed below, before the call runs
        envelope = Envelope(
            run_state=state_document(state) if state is not None else {},
            started_by=started_by,
            awaiting=awaiting,
            held=held,
            finished=finished,
            decided=serving.decided,
            window=None if finished else window,
        )
        return cls(envelope, awaiting, state)


async def _stopped_first(serving: ServingView, scope: TurnScope, turn: asyncio.Task[Any]) -> bool:
    """Wait for the turn, unless someone asks the run to stop first: then abandon it (a
    model call has no side effects) once no side-effecting tool is mid-way (a tool already
    started finishes and is recorded). True when the turn was abandoned."""
    keeper = serving.keeper
    if keeper is None:
        await asyncio.wait({turn})
        return False
    asked = keeper.when_stop_asked()
    try:
        await asyncio.wait({turn, asked}, return_when=asyncio.FIRST_COMPLETED)
        if turn.done():
            return False
        if scope.running:  # let the side effect finish and be recorded
            idle = asyncio.create_task(scope.idle.wait())
            await asyncio.wait({turn, idle}, return_when=asyncio.FIRST_COMPLETED)
            idle.cancel()
        if turn.done():
            return False
        turn.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await turn
        return True
    finally:
        asked.cancel()


async def _tell_late(serving: ServingView, scope: TurnScope) -> None:
    """Results recorded after the lease was taken from this serve (a discard, while the
    tool ran): the thread is told what became of them (best effort: the ledger has it)."""
    for call_id, tool, output in scope.late:
        await serving.emit_now(
            Notice(
                key=serving.key,
                kind=NoticeKind.TOOL_FINISHED_LATE,
                text=f"`{tool}` (call {call_id}) finished after this conversation's saved "
                "state was set aside, and its result was recorded; the conversation was not "
                "continued. Its result:",
                details=[output[:LATE_OUTPUT_CHARACTERS]],
            )
        )
    scope.late.clear()


def answer_checked(agent: Agent[Any], run_config: RunConfig) -> bool:
    """The agent's final answer must pass output guardrails first (its own, or the run's).
    The SDK runs them once the answer is whole, so its text is not shown while the model
    writes it: a check that trips must not find it already in the thread. The thread still
    sees the run work (its status, its tool steps) and gets the answer once it passes."""
    return bool(agent.output_guardrails or run_config.output_guardrails)


def every_turn() -> bool:
    """A checkpoint after every turn."""
    return True


async def run_turns(
    agent: Agent[Any],
    start: str | list[TResponseInputItem] | RunState[Any],
    *,
    session: Session,
    run_config: RunConfig,
    max_turns: int,
    time_limit: float,
    on_text: Callable[[str], Awaitable[None]] | None = None,
    context: Any = None,
    checkpoint_due: Callable[[], bool] = every_turn,
) -> RunResultStreaming:
    """Turns until the next checkpoint; `on_text` sees the answer's text as the model
    streams it (unless output guardrails check it first: `answer_checked`); `context` is
    the run context tools get (it replaces the one a resumed state carries)."""
    result = Runner.run_streamed(
        agent, start, context=context, session=session, run_config=run_config, max_turns=max_turns
    )
    cancel_asked = False
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(time_limit) as turn_clock:
            async for event in result.stream_events():
                if event.type != "raw_response_event":
                    continue
                if not cancel_asked and checkpoint_due():
                    result.cancel(mode="after_turn")
                    cancel_asked = True
                data = event.data
                kind = getattr(data, "type", "")
                if kind == TURN_BEGINS:
                    turn_clock.reschedule(loop.time() + time_limit)
                elif (
                    kind == TEXT_DELTA
                    and on_text is not None
                    and not answer_checked(result.current_agent, run_config)
                ):
                    await on_text(str(getattr(data, "delta", "")))
    except BaseException:
        result.cancel()  # immediate: the SDK's background task must not run on
        raise
    return result
