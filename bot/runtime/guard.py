"""At-most-once tools, without tool authors doing anything.

Every function tool is wrapped. A side-effecting call (any tool not marked `retry_safe`)
always pauses first, so the runtime checkpoints after the model chose the call and before it
runs; the runtime then approves it itself unless a person must. The ledger records it as
approved (in the same write as the checkpoint that approved it), as started just before it
runs, then completed with its output. The side effects of one model response run one at a
time (retry-safe calls still run together), so a crash cuts short at most one of them; one
approved that never started is run after the restart. A call id seen again (after a crash
or on another replica) returns the recorded output, or, if it started but never completed,
an "outcome unknown" result: it is never run twice.

Outcomes are recorded truthfully: a tool that raised an ordinary exception ran and failed (a
known outcome, recorded); a tool interrupted by cancellation or shutdown stays `started`
(its outcome is unknown), and so does a call that got no answer: it timed out (the MCP
client's read timeout, the tool's own `timeout_seconds`, a timeout it raised) or its
connection was lost while it was in flight (`tool_failures`). Such a call is never sent
again, unless it is keyed: then it is sent again with its key, while its attempts last. A
call that a stop beat (up to the moment the tool itself starts) never runs, and the stop
records it as cancelled. A storage failure or a lost lease inside a
tool must not reach the Agents SDK (which would turn it into a `UserError`): it is kept on
the turn's scope (`turn_scope`), and the runtime acts on it after the turn. How authors mark
tools is in `tool_marks`."""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from agents import (
    Agent,
    CodeInterpreterTool,
    CustomTool,
    FileSearchTool,
    FunctionTool,
    ImageGenerationTool,
    RunContextWrapper,
    ToolSearchTool,
    WebSearchTool,
)
from agents.mcp._logging import get_mcp_server_log_name as mcp_server_log_name
from agents.tool_context import ToolContext

from bot.runtime.agent_graph import agents_of, is_agent_tool
from bot.runtime.keyed_calls import send_again, start_again, with_key
from bot.runtime.mcp_failures import McpServerDown
from bot.runtime.mcp_servers import watched_call
from bot.runtime.open_calls import STOPPED_BEFORE_IT_RAN, UNKNOWN_OUTCOME
from bot.runtime.progress import Step
from bot.runtime.tool_failures import NoAnswer, no_answer, noting_failures, unanswered_output
from bot.runtime.tool_marks import (
    KEY_ARGUMENT,
    MCP_SERVER,
    idempotent,
    is_idempotent,
    is_retry_safe,
    retry_safe,
    server_says_idempotent,
    server_says_retry_safe,
)
from bot.runtime.turn_scope import CURRENT_SCOPE, TurnScope, Unanswered
from storage import (
    LeaseLost,
    StorageError,
    StorageUnavailable,
    ToolCallClaim,
    ToolCallRecord,
    ToolCallStatus,
)

GuardableT = TypeVar("GuardableT", FunctionTool, CustomTool)
log = logging.getLogger(__name__)
COMPLETION_ATTEMPTS = 8  # recording an output that exists only in memory is worth waiting for

__all__ = [
    "CURRENT_SCOPE",
    "UNKNOWN_OUTCOME",
    "TurnScope",
    "UnguardedTool",
    "guard_agent",
    "idempotent",
    "is_idempotent",
    "is_retry_safe",
    "retry_safe",
]


NeedsApproval = bool | Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]


class UnguardedTool(ValueError):
    """An agent has a tool the bot cannot run at most once: the agent is refused at load."""


# Tools that run at OpenAI, not here: nothing of theirs happens twice because of a restart
# here that a model call would not repeat as well (and the bot can't guard them anyway).
HOSTED_READ_ONLY = (
    FileSearchTool,
    WebSearchTool,
    ImageGenerationTool,
    CodeInterpreterTool,
    ToolSearchTool,
)


def guard_agent(agent: Agent[Any]) -> Agent[Any]:
    """Guard every tool of every agent `agent` reaches (handoffs, `handoff()` objects,
    agents used as tools), in place, so that the agents the SDK runs and restores (its agent
    map is this same graph) are the guarded ones; tools listed at run time (MCP servers) are
    guarded as they are listed. Raises `UnguardedTool` for a tool the bot cannot run at most
    once and that is not marked `retry_safe`."""
    for member in agents_of(agent):
        tools = [_guarded(member, tool) for tool in member.tools]
        if any(new is not old for new, old in zip(tools, member.tools, strict=True)):
            member.tools = tools  # (once: the SDK refuses tools changed under a run)
        for server in member.mcp_servers:
            _check_retries(member, server)
        if member.mcp_servers and not getattr(member, "_bot_guarded_mcp", False):
            setattr(member, "get_mcp_tools", _guarded_mcp_tools(member))  # noqa: B010
            setattr(member, "_bot_guarded_mcp", True)  # noqa: B010
    return agent


def _check_retries(agent: Agent[Any], server: Any) -> None:
    """The SDK sends a failed MCP call again by itself when the server sets
    `max_retry_attempts`: a timeout would then repeat a side effect. Only a server whose
    tools are all retry-safe, or all keyed (each attempt carries the same key), may."""
    retries = getattr(server, "max_retry_attempts", 0)
    if not retries or is_retry_safe(server) or is_idempotent(server):
        return
    raise UnguardedTool(
        f"agent {agent.name!r}: MCP server {mcp_server_log_name(server.name)!r} sets "
        f"max_retry_attempts={retries}: the SDK would send a call that timed out again, so a "
        "side effect could happen twice; leave it at 0, or mark the server retry_safe(...) or "
        "idempotent(...) if every one of its tools is (docs/agents.md)"
    )


def _guarded(agent: Agent[Any], tool: Any) -> Any:
    if isinstance(tool, FunctionTool):
        return guard_tool(tool)
    if isinstance(tool, CustomTool):
        return guard_tool(tool)
    if isinstance(tool, HOSTED_READ_ONLY) or is_retry_safe(tool):
        return tool
    raise UnguardedTool(
        f"agent {agent.name!r}: tool {getattr(tool, 'name', '?')!r} ({type(tool).__name__}) "
        "runs outside the bot's tool ledger, so it could run twice after a restart; mark it "
        "retry_safe(...) if running it again is harmless, or give the agent a function tool "
        "instead (docs/agents.md)"
    )


def _guarded_mcp_tools(agent: Agent[Any]) -> Callable[[RunContextWrapper[Any]], Awaitable[Any]]:
    """The agent's MCP tools, listed from its servers at run time, each guarded like a
    function tool (retry-safe per server, or per tool name: `retry_safe`)."""
    listed = type(agent).get_mcp_tools

    async def get_mcp_tools(run_context: RunContextWrapper[Any]) -> list[Any]:
        tools = await listed(agent, run_context)
        servers = {mcp_server_log_name(server.name): server for server in agent.mcp_servers}
        guarded: list[Any] = []
        for tool in tools:
            server_name, tool_name = (getattr(tool, "_mcp_tool_binding", None) or ("", ""))[:2]
            server = servers.get(server_name)
            if not isinstance(tool, FunctionTool):
                guarded.append(tool)  # MCP servers list function tools only
                continue
            setattr(tool, MCP_SERVER, server)  # its calls are watched (`mcp_servers`)
            if server is not None and server_says_retry_safe(server, str(tool_name)):
                retry_safe(tool)
            if server is not None and server_says_idempotent(server, str(tool_name)):
                idempotent(tool, key_argument=getattr(server, KEY_ARGUMENT, None))
            guarded.append(guard_tool(tool))
        return guarded

    return get_mcp_tools


def guard_tool(tool: GuardableT) -> GuardableT:
    """A copy of a function (or custom) tool that runs at most once per call id: it pauses
    before it runs (so its call id is checkpointed), is recorded as started, then completed.
    A tool that runs another agent is not itself a side effect: its agent's tools are
    guarded, and it keeps its own approval setting."""
    if getattr(tool, "_bot_guarded", False):
        return tool
    guarded = copy.copy(tool)
    carrier = is_agent_tool(tool)
    if not carrier:
        guarded.on_invoke_tool = _guarded_invoke(tool)
        if isinstance(guarded, FunctionTool) and not is_retry_safe(tool):
            guarded.timeout_seconds = None  # the guard's, around the tool alone
    guarded.needs_approval = _guarded_approval(tool, carrier=carrier)  # type: ignore[assignment]
    setattr(guarded, "_bot_guarded", True)  # noqa: B010
    return guarded


def _guarded_approval(tool: FunctionTool | CustomTool, *, carrier: bool = False) -> NeedsApproval:
    original: NeedsApproval = tool.needs_approval  # type: ignore[assignment]
    safe = is_retry_safe(tool) or carrier

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


def _guarded_invoke(
    tool: FunctionTool | CustomTool,
) -> Callable[[ToolContext[Any], str], Awaitable[Any]]:
    invoke_original = noting_failures(tool).on_invoke_tool
    safe = is_retry_safe(tool)
    keyed = is_idempotent(tool)
    key_argument = getattr(tool, KEY_ARGUMENT, None)
    server = getattr(tool, MCP_SERVER, None)  # an MCP tool's: a call may find it down
    # A side effect's time limit is the guard's (`guard_tool` takes it from the SDK): a call
    # that runs out of time got no answer, and the model must not be told it may try again.
    limit = None if safe else getattr(tool, "timeout_seconds", None)

    async def original(ctx: ToolContext[Any], arguments: str) -> Any:
        output = invoke_original(ctx, arguments)  # a custom tool's may be plain
        return await output if inspect.isawaitable(output) else output

    async def attempt(ctx: ToolContext[Any], arguments: str) -> tuple[Any, NoAnswer | None]:
        """Send the call once: its output, or why no answer came (a timeout, a connection
        lost while it was in flight: it may have happened). Raises what is an answer."""

        async def run() -> Any:
            if limit is None:
                return await original(ctx, arguments)
            return await asyncio.wait_for(original(ctx, arguments), limit)

        try:
            return await watched_call(server, run, safe=False)
        except McpServerDown:
            raise
        except Exception as exc:
            why = no_answer(exc)
            if why is None:
                raise
            return None, why

    async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
        scope = CURRENT_SCOPE.get()
        if scope is None:
            return await original(ctx, arguments)
        call_id = ctx.tool_call_id
        if safe:
            await scope.show(call_id, tool.name, Step.RUNNING)
            output, _ = await watched_call(server, lambda: original(ctx, arguments), safe=True)
            await scope.show(call_id, tool.name, _fate(output))
            return output
        # A stop that came first: the call never runs. Approved by this serve (armed), the
        # stop records it as cancelled once the turn is over (one writer, after every tool
        # of the turn is done with it); approved before a restart, so does whoever closes
        # the run's calls (`state_checks.close_calls`).
        if scope.stop_requested():
            return STOPPED_BEFORE_IT_RAN
        # The run's side effects start one at a time, each recorded as started just before
        # it runs: a crash leaves at most one of them started and unfinished (its outcome
        # unknown), and the others approved, to be run after the restart.
        async with scope.one_at_a_time():
            if scope.stop_requested():  # while an earlier one ran
                return STOPPED_BEFORE_IT_RAN
            # From its claim on it counts as running: a stop waits for it to start or not
            # (never abandons the turn between its claim and the tool's start).
            scope.running += 1
            scope.idle.clear()
            try:
                output = await claim_and_run(scope, ctx, arguments)
            finally:
                scope.running -= 1
                if scope.running == 0:
                    scope.idle.set()
        if not isinstance(output, _Settled):
            await scope.show(call_id, tool.name, scope.fates[call_id])
            return output
        return output.output

    async def claim_and_run(scope: TurnScope, ctx: ToolContext[Any], arguments: str) -> Any:
        """Claim the call and run it, or say what the ledger says of it (`_Settled`)."""
        call_id = ctx.tool_call_id
        approved_here = call_id in scope.armed  # by this serve's commit, not before a restart
        try:
            claim = await _begin(scope, call_id, tool.name, arguments)
        except StorageError as fault:
            scope.fault = fault
            raise
        if not claim.created:
            record: ToolCallRecord | None = claim.record
            if claim.record.status is ToolCallStatus.STARTED and keyed:
                record = await start_again(scope, call_id, tool.name, claim.record)
            if record is not None:  # not started again: what the ledger says of it
                scope.armed.settled(call_id)
                return _Settled(await _as_recorded(scope, call_id, tool.name, record))
        scope.armed.claimed(call_id)
        # Until the tool itself starts the call stays armed: a stop that lands meanwhile
        # (while the progress is shown, say) has it recorded as cancelled, not as started.
        if key_argument:  # a keyed MCP tool receives its key as an argument
            arguments = with_key(arguments, key_argument, ctx)
        await scope.show(call_id, tool.name, Step.RUNNING)
        if scope.stop_requested():
            return _Settled(STOPPED_BEFORE_IT_RAN)
        # Cancellation, KeyboardInterrupt and SystemExit pass through unrecorded: the call
        # stays `started`, its outcome unknown; so does a call that got no answer (`attempt`),
        # unless it is keyed: then it is sent again with its key, while its attempts last.
        # An ordinary exception (usually turned into an error output by the SDK inside
        # `original`) is a known outcome: it ran and failed; so is an MCP server found down
        # before the call was first sent (it did not run).
        scope.armed.started(call_id)
        if not approved_here and claim.created:
            scope.started_late.append((call_id, tool.name))
        try:
            output, why = await attempt(ctx, arguments)
        except Exception as exc:
            await _failed(scope, call_id, tool.name, exc)
            raise
        while why is not None and keyed and await send_again(scope, call_id, tool.name, why):
            try:
                output, why = await attempt(ctx, arguments)
            except McpServerDown:
                raise  # not sent again yet: it stays `started`, sent when the run goes on
            except Exception as exc:
                await _failed(scope, call_id, tool.name, exc)
                raise
        if why is not None:
            return _Settled(await _unanswered(scope, call_id, tool.name, server, why))
        try:
            await _complete(scope, call_id, tool.name, as_text(output))
        except StorageError as fault:
            scope.fault = fault
            raise
        scope.fates[call_id] = _fate(output)
        return output

    return invoke


@dataclass(frozen=True)
class _Settled:
    """What a call returns when it did not run here to completion: the ledger's word, a
    stop's, or no answer (each shown already)."""

    output: Any


async def _as_recorded(scope: TurnScope, call_id: str, tool: str, record: ToolCallRecord) -> Any:
    """What the model is given for a call the ledger settled or saw started before."""
    if record.status is ToolCallStatus.COMPLETED:
        scope.ran_before.append((call_id, tool))
        await scope.show(call_id, tool, Step.DONE)
        return record.output
    if record.status is ToolCallStatus.CANCELLED:
        return STOPPED_BEFORE_IT_RAN
    scope.unknown_outcomes.append((call_id, tool))
    await scope.show(call_id, tool, Step.UNKNOWN)
    return UNKNOWN_OUTCOME


async def _failed(scope: TurnScope, call_id: str, tool: str, exc: Exception) -> None:
    """The call raised an answer: it ran and failed (recorded as completed, with the error)."""
    scope.fates[call_id] = Step.FAILED
    await scope.show(call_id, tool, Step.FAILED)
    try:
        await _complete(scope, call_id, tool, f"error: {type(exc).__name__}: {exc}")
    except StorageError as fault:
        scope.fault = fault


async def _unanswered(scope: TurnScope, call_id: str, tool: str, server: Any, why: NoAnswer) -> str:
    """A call sent that got no answer (it timed out, or its connection failed while it was
    in flight): its outcome is unknown; it stays `started` and is reported so."""
    label = mcp_server_log_name(server.name) if server is not None else None
    log.warning("%s: `%s` (call %s) got no answer (%s)", scope.lease.key, tool, call_id, why)
    scope.unanswered.append(Unanswered(call_id=call_id, tool=tool, why=why, server=label))
    scope.fates[call_id] = Step.UNKNOWN
    await scope.show(call_id, tool, Step.UNKNOWN)
    return unanswered_output(why, label)


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
