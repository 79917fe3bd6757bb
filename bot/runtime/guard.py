"""At-most-once tools, without tool authors doing anything.

Every function tool is wrapped. A side-effecting call (any tool not marked `retry_safe`)
always pauses first, so the runtime checkpoints after the model chose the call and before it
runs; the runtime then approves it itself unless a person must. While it runs, the ledger
records it as started (in the same write as the checkpoint that approved it), then completed
with its output. A call id seen again (after a crash
or on another replica) returns the recorded output, or, if it started but never completed,
an "outcome unknown" result: it is never run twice.

Outcomes are recorded truthfully: a tool that raised an ordinary exception ran and failed (a
known outcome, recorded); a tool interrupted by cancellation or shutdown stays `started`
(its outcome is unknown); a call that a stop beat (up to the moment the tool itself starts)
never runs, and the stop records it as cancelled. A storage failure or a lost lease inside a
tool must not reach the Agents SDK (which would turn it into a `UserError`): it is kept on
the turn's scope, and the runtime acts on it after the turn."""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from bot.runtime.closing import STOPPED_BEFORE_IT_RAN, UNKNOWN_OUTCOME
from bot.runtime.progress import Step, shown
from bot.runtime.storage_calls import StorageCalls
from storage import (
    Lease,
    LeaseLost,
    StorageError,
    StorageUnavailable,
    Store,
    ToolCallClaim,
    ToolCallStatus,
)

RETRY_SAFE = "_bot_retry_safe"
COMPLETION_ATTEMPTS = 8  # recording an output that exists only in memory is worth waiting for

__all__ = ["UNKNOWN_OUTCOME", "TurnScope", "guard_agent", "is_retry_safe", "retry_safe"]


def retry_safe(tool: FunctionTool) -> FunctionTool:
    """Declare a tool read-only: it may run again after a crash and needs no pre-call pause."""
    setattr(tool, RETRY_SAFE, True)
    return tool


def is_retry_safe(tool: FunctionTool) -> bool:
    return bool(getattr(tool, RETRY_SAFE, False))


@dataclass
class TurnScope:
    """What wrapped tools need while a run is driven: storage and the lease to fence with,
    and what they observed for the runtime to act on."""

    storage: StorageCalls
    lease: Lease
    armed: set[str] = field(default_factory=set)  # recorded as started, not started yet
    human_approval: dict[str, bool] = field(default_factory=dict)
    unknown_outcomes: list[tuple[str, str]] = field(default_factory=list)  # (call id, tool)
    fault: StorageError | None = None  # raised by storage inside a tool; re-raised after the turn
    on_step: Callable[[str, str, Step], Awaitable[None]] | None = None  # progress, best effort
    running: int = 0  # side-effecting calls executing right now (a stop waits for them)
    idle: asyncio.Event = field(default_factory=asyncio.Event)  # set while `running` is 0
    stop_requested: Callable[[], bool] = lambda: False  # someone asked the run to stop
    late: list[tuple[str, str, str]] = field(default_factory=list)  # (call, tool, output)
    # recorded after the lease was taken from us (a discard): the thread is told after

    @property
    def store(self) -> Store:
        return self.storage.store

    def __post_init__(self) -> None:
        self.idle.set()

    def reset(self) -> None:
        self.human_approval.clear()
        self.unknown_outcomes.clear()
        self.fault = None

    async def show(self, call_id: str, tool: str, state: Step) -> None:
        if self.on_step is not None:
            on_step = self.on_step
            await shown(lambda: on_step(call_id, tool, state))


CURRENT_SCOPE: ContextVar[TurnScope | None] = ContextVar("bot_turn_scope", default=None)

NeedsApproval = bool | Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]


def guard_agent(agent: Agent[Any], _done: dict[int, Agent[Any]] | None = None) -> Agent[Any]:
    """A copy of `agent` (and of the agents it hands off to) with every function tool guarded."""
    done = _done if _done is not None else {}
    if id(agent) in done:
        return done[id(agent)]
    clone = agent.clone()
    done[id(agent)] = clone
    clone.tools = [guard_tool(t) if isinstance(t, FunctionTool) else t for t in agent.tools]
    clone.handoffs = [guard_agent(h, done) if isinstance(h, Agent) else h for h in agent.handoffs]
    return clone


def guard_tool(tool: FunctionTool) -> FunctionTool:
    if getattr(tool, "_bot_guarded", False):
        return tool
    guarded = copy.copy(tool)
    guarded.on_invoke_tool = _guarded_invoke(tool)
    guarded.needs_approval = _guarded_approval(tool)
    guarded._bot_guarded = True  # type: ignore[attr-defined]
    return guarded


def _guarded_approval(tool: FunctionTool) -> NeedsApproval:
    original: NeedsApproval = tool.needs_approval
    safe = is_retry_safe(tool)

    async def needs_approval(
        ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        if isinstance(original, bool):
            human = original
        else:
            decision = original(ctx, params, call_id)
            human = bool(await decision if inspect.isawaitable(decision) else decision)
        scope = CURRENT_SCOPE.get()
        if scope is not None:
            scope.human_approval[call_id] = human
        return human if safe else True

    return needs_approval


def _guarded_invoke(tool: FunctionTool) -> Callable[[ToolContext[Any], str], Awaitable[Any]]:
    original = tool.on_invoke_tool
    safe = is_retry_safe(tool)

    async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
        scope = CURRENT_SCOPE.get()
        if scope is None:
            return await original(ctx, arguments)
        if safe:
            await scope.show(ctx.tool_call_id, tool.name, Step.RUNNING)
            output = await original(ctx, arguments)
            await scope.show(ctx.tool_call_id, tool.name, _fate(output))
            return output
        # A stop that came first: the call never runs. If it was recorded as started, it
        # stays armed, and the stop records it as cancelled once the turn is over (one
        # writer, after every tool of the turn is done with it).
        if scope.stop_requested():
            return STOPPED_BEFORE_IT_RAN
        if ctx.tool_call_id not in scope.armed:  # else this serve's commit recorded it
            try:
                claim = await _begin(scope, ctx.tool_call_id, tool.name, arguments)
            except StorageError as fault:
                scope.fault = fault
                raise
            if not claim.created:
                if claim.record.status is ToolCallStatus.COMPLETED:
                    await scope.show(ctx.tool_call_id, tool.name, Step.DONE)
                    return claim.record.output
                scope.unknown_outcomes.append((ctx.tool_call_id, tool.name))
                await scope.show(ctx.tool_call_id, tool.name, Step.UNKNOWN)
                return UNKNOWN_OUTCOME
            scope.armed.add(ctx.tool_call_id)
        # Until the tool itself starts the call stays armed: a stop that lands meanwhile
        # (while the progress is shown, say) has it recorded as cancelled, not as started.
        await scope.show(ctx.tool_call_id, tool.name, Step.RUNNING)
        if scope.stop_requested():
            return STOPPED_BEFORE_IT_RAN
        # Cancellation, KeyboardInterrupt and SystemExit pass through unrecorded: the call
        # stays `started`, its outcome unknown. An ordinary exception (usually turned into an
        # error output by the SDK inside `original`) is a known outcome: it ran and failed.
        scope.armed.discard(ctx.tool_call_id)
        scope.running += 1
        scope.idle.clear()
        try:
            try:
                output = await original(ctx, arguments)
            except Exception as exc:
                await scope.show(ctx.tool_call_id, tool.name, Step.FAILED)
                failure = f"error: {type(exc).__name__}: {exc}"
                try:
                    await _complete(scope, ctx.tool_call_id, tool.name, failure)
                except StorageError as fault:
                    scope.fault = fault
                raise
            try:
                await _complete(scope, ctx.tool_call_id, tool.name, as_text(output))
            except StorageError as fault:
                scope.fault = fault
                raise
        finally:
            scope.running -= 1
            if scope.running == 0:
                scope.idle.set()
        await scope.show(ctx.tool_call_id, tool.name, _fate(output))
        return output

    return invoke


async def _begin(scope: TurnScope, call_id: str, name: str, arguments: str) -> ToolCallClaim:
    try:
        return await scope.storage(
            scope.store.begin_tool_call, scope.lease, call_id, name, arguments
        )
    except StorageUnavailable:
        # One more try after a pause: if the first write landed (its answer was lost), the
        # call is `started` under this very lease, by this very invocation.
        await asyncio.sleep(1)
        claim = await scope.storage(
            scope.store.begin_tool_call, scope.lease, call_id, name, arguments
        )
        mine = (
            claim.record.status is ToolCallStatus.STARTED
            and claim.record.fence == scope.lease.fence
        )
        return claim.model_copy(update={"created": True}) if mine else claim


async def _complete(scope: TurnScope, call_id: str, tool: str, output: str) -> None:
    """Record the result; when the lease was taken meanwhile (a discard), the result is
    recorded all the same and the run goes no further (`LeaseLost`)."""
    for attempt in range(COMPLETION_ATTEMPTS):
        try:
            held = await scope.storage(scope.store.complete_tool_call, scope.lease, call_id, output)
        except StorageUnavailable:
            if attempt == COMPLETION_ATTEMPTS - 1:
                raise
            await asyncio.sleep(min(2**attempt, 10))
            continue
        if not held:
            scope.late.append((call_id, tool, output))
            raise LeaseLost(str(scope.lease.key), scope.lease.fence)
        return


def _fate(output: Any) -> Step:
    """The SDK turns a tool's exception into an output that starts like this."""
    text = as_text(output)
    failed = text.startswith("error:") or text.startswith("An error occurred while running")
    return Step.FAILED if failed else Step.DONE


def as_text(output: Any) -> str:
    """The output as the model will see it on a replay."""
    if isinstance(output, str):
        return output
    try:
        return json.dumps(output, ensure_ascii=False)
    except TypeError:
        return str(output)
