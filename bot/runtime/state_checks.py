"""Whether saved state can be trusted, and what happens when it can't.

Before anything runs from a checkpoint it must be younger than the state TTL, of a run-state
schema and envelope format this version reads, made for the same agent fingerprint, intact
(size, sha256) and accepted by the SDK. Otherwise it fails closed: nothing from it runs, the
history's open calls are closed as the tool ledger says (ran / outcome unknown / not run),
the checkpoint is replaced by a finished one carrying the notice (so the notice is delivered
even after a crash), and the next message starts a fresh run."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agents import RunState
from agents.exceptions import ModelBehaviorError, UserError
from agents.run_state import CURRENT_SCHEMA_VERSION, SUPPORTED_SCHEMA_VERSIONS

from bot.runtime.envelope import ENVELOPE_FORMAT, Envelope
from bot.runtime.mcp_failures import SEEN_DOWN, McpServerDown
from bot.runtime.mcp_servers import paused_for
from bot.runtime.open_calls import (
    NOT_STARTED,
    ClosedCalls,
    answered_calls_of_the_run,
    unanswered_calls,
)
from bot.runtime.outcomes import Notice, NoticeKind, PendingCall, new_reference
from bot.runtime.pass_results import FailedClosed, Paused
from bot.runtime.request_context import for_restore, request_context
from storage import CheckpointError, Conversation, Status, ToolCallRecord, ToolCallStatus

if TYPE_CHECKING:
    from bot.runtime.serving_view import ServingView

log = logging.getLogger(__name__)


class WrittenByNewer(Exception):
    """The checkpoint was written by a newer version (a rolling upgrade is under way):
    leave the conversation as it is, for a replica that can read it."""


def newer_schema(version: str) -> bool:
    """A run-state schema newer than this SDK writes (so one this SDK cannot read)."""
    try:
        return _parts(version) > _parts(CURRENT_SCHEMA_VERSION)
    except ValueError:
        return False


def _parts(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


class FailClosed(Exception):
    """Saved state can't be trusted: run nothing from it, say so, restart from history."""

    def __init__(self, kind: NoticeKind, why: str) -> None:
        super().__init__(why)
        self.kind = kind
        self.why = why


def verify(record: Conversation, *, fingerprint: str, state_ttl: timedelta, now: Any) -> None:
    """Before loading: is this checkpoint ours, current enough, and of a known schema?"""
    pointer = record.checkpoint
    assert pointer is not None
    age = now - pointer.created_at
    if age > state_ttl:
        raise FailClosed(
            NoticeKind.STATE_EXPIRED,
            f"it is {human_age(age)} old, older than the limit of {human_age(state_ttl)}",
        )
    if pointer.schema_version not in SUPPORTED_SCHEMA_VERSIONS:
        raise FailClosed(
            NoticeKind.STATE_INCOMPATIBLE,
            f"it was written in run-state schema {pointer.schema_version}, which this "
            "version of the bot cannot read",
        )
    if pointer.agent_fingerprint != fingerprint:
        raise FailClosed(
            NoticeKind.STATE_INCOMPATIBLE,
            "the agent changed since it was saved (its tools or instructions differ)",
        )


async def current_envelope(serving: ServingView) -> Envelope | FailedClosed | None:
    """The checkpoint's envelope, verified; None when there is none, or when it is finished
    and owes nothing (not even loaded); `FailedClosed` when it was set aside (a notice says
    so)."""
    record = serving.record
    pointer = record.checkpoint
    if pointer is None:
        return None
    if pointer.finished and record.undelivered_from() is None:
        return None
    if pointer.schema_version not in SUPPORTED_SCHEMA_VERSIONS and newer_schema(
        pointer.schema_version
    ):
        raise WrittenByNewer(f"run-state schema {pointer.schema_version}")
    failure: FailClosed | None = None
    try:
        verify(
            record,
            fingerprint=serving.parts.fingerprint,
            state_ttl=serving.store.state_ttl,
            now=serving.store.clock(),
        )
    except FailClosed as refused:
        failure = refused  # still read it below, to say what is lost
    envelope: Envelope | None = None
    try:
        document = await serving.storage_calls(serving.store.load_checkpoint, pointer)
        if int(document.get("format", 1)) > ENVELOPE_FORMAT:
            raise WrittenByNewer(f"envelope format {document.get('format')}")
        envelope = Envelope.model_validate(document)
    except CheckpointError as exc:
        log.error("%s: checkpoint %s: %s", record.key, pointer.object_key, exc)
        failure = failure or FailClosed(NoticeKind.STATE_DAMAGED, f"it is {exc.reason}")
    except ValueError as exc:
        log.error("%s: checkpoint %s unreadable: %s", record.key, pointer.object_key, exc)
        failure = failure or FailClosed(NoticeKind.STATE_DAMAGED, "it could not be read")
    if envelope is not None and envelope.finished and failure is not None:
        # Nothing was left to continue: the next run starts fresh anyway. What it still owes
        # the thread (an answer, a notice) is delivered all the same, however old: the
        # record's state lives while a delivery is owed (chaos 470013: a stopped notice
        # whose third retry came after the checkpoint's TTL was dropped unsaid).
        return envelope if record.undelivered_from() is not None else None
    if failure is not None or envelope is None:
        return await fail_closed(
            serving,
            failure or FailClosed(NoticeKind.STATE_DAMAGED, "it is unreadable"),
            envelope,
        )
    return envelope


async def load_state(
    serving: ServingView, envelope: Envelope
) -> RunState[Any] | Paused | FailedClosed:
    """The SDK's run state, with the run context rebuilt from the envelope (not the copy the
    state carries). Else what the serve is left as: `FailedClosed` when it was set aside
    (`fail_closed`), `Paused` when the MCP servers it needs are down (the thread then
    waits, interrupted: `paused_for`)."""
    context = request_context(
        serving.key, envelope.started_by, envelope.decided, serving.lease.generation
    )
    # Restoring lists the current agent's MCP tools, and the SDK hides whatever a restore
    # raises behind a redacted error: the servers are checked first (a cached listing would
    # not notice them gone), and any found down meanwhile are noted here.
    down: set[str] = set()
    token = SEEN_DOWN.set(down)
    try:
        await serving.parts.mcp.check_for(_current_agent_name(envelope.run_state))
        return await RunState.from_json(
            serving.parts.agent,
            envelope.run_state,
            context_override=for_restore(context),
            # The state of a nested run paused inside an agent tool is restored by the
            # SDK without the override: it gets the same context (and no warning).
            context_deserializer=lambda _: context,
        )
    except McpServerDown as unavailable:
        return await paused_for(serving, unavailable.servers)
    except Exception as exc:
        if down:
            return await paused_for(serving, sorted(down))
        if not isinstance(exc, UserError | ModelBehaviorError | ValueError | KeyError | TypeError):
            raise
        log.error("%s: the SDK refused the saved state: %s", serving.key, exc)
        return await fail_closed(
            serving, FailClosed(NoticeKind.STATE_INCOMPATIBLE, "the SDK refused it"), envelope
        )
    finally:
        SEEN_DOWN.reset(token)


def _current_agent_name(run_state: dict[str, Any]) -> str | None:
    current = run_state.get("current_agent")
    name = current.get("name") if isinstance(current, dict) else None
    return name if isinstance(name, str) else None


async def fail_closed(
    serving: ServingView, failure: FailClosed, envelope: Envelope | None
) -> FailedClosed:
    """Run nothing; close the history's open calls as the ledger says; replace the
    checkpoint by a finished one that carries the notice (and any messages held for the
    next run); say what was lost and why. Returns that finished envelope, for the serve to
    serve what arrived from."""
    reference = new_reference()
    log.warning("%s [%s]: failing closed: %s", serving.key, reference, failure.why)
    closed = await close_calls(serving, run=envelope)
    lost = closed.describe() or "The run in progress was stopped."
    notice = Notice(
        key=serving.key,
        kind=failure.kind,
        text=f"I can't safely continue from the saved state: {failure.why}. Nothing from it "
        f"was run again. {lost} The history up to the last completed step is kept; your next "
        "message starts a fresh run.",
        reference=reference,
        settles=closed.undecided,
    )
    tombstone = Envelope(
        run_state={},
        started_by=envelope.started_by if envelope else "",
        finished=True,
        held=envelope.held if envelope else [],
        decided=envelope.decided if envelope else {},
    )
    await serving.set_aside_state(
        tombstone,
        notice=notice,
        items=closed.items,
        consume=[],
        status=Status.SET_ASIDE,
        release_as=Status.SET_ASIDE,
        orphan_ok=True,  # the run's state is set aside already: an orphan blob harms none
    )
    return FailedClosed(tombstone)


async def close_calls(
    serving: ServingView,
    *,
    run: Envelope | None = None,
    answered: bool = False,
    window: int = 200,
) -> ClosedCalls:
    """The outputs that close every open call in the recent history, from the ledger. Calls
    of `run` (the checkpoint's) that the history does not hold, those inside an agent used
    as a tool, are told as the ledger says too: one still waiting for a person was not run,
    one approved and started but never completed is "outcome unknown" (it was left started,
    and nobody told, when the run stopped before it finished). A call approved and never
    started never will be now: the ledger records it cancelled. With `answered` (the
    history ends with the run in progress), the calls of the run already answered are told
    too."""
    storage_calls, store, key = serving.storage_calls, serving.store, serving.key
    generation = serving.record.generation

    async def ledger(call_id: str) -> ToolCallRecord | None:
        record = await storage_calls(store.get_tool_call, key, call_id, generation)
        if record is not None and record.status is ToolCallStatus.APPROVED:
            await storage_calls(
                store.complete_tool_call,
                serving.lease,
                call_id,
                NOT_STARTED,
                status=ToolCallStatus.CANCELLED,
            )
        return record

    page = await storage_calls(store.read_items, key, window)
    closed = ClosedCalls()
    for call in answered_calls_of_the_run(page.items) if answered else []:
        closed.add_answered(call, await ledger(call["call_id"]))
    calls = unanswered_calls(page.items)
    for call in calls:
        closed.add(call, await ledger(call["call_id"]))
    seen = {call["call_id"] for call in calls}
    for pending in run.awaiting if run else []:
        if pending.call_id not in seen:
            seen.add(pending.call_id)
            closed.add_nested(pending, await ledger(pending.call_id))
    approved = [c for c, made in (run.decided if run else {}).items() if made.approved]
    for call_id in approved:
        if call_id not in seen:
            record = await ledger(call_id)
            if record is not None and record.status in (
                ToolCallStatus.STARTED,
                ToolCallStatus.APPROVED,
            ):
                closed.add_nested(
                    PendingCall(
                        call_id=call_id, tool_name=record.tool_name, arguments=record.arguments
                    ),
                    record,
                )
    return closed


def human_age(age: timedelta) -> str:
    seconds = int(age.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
