"""Stopping a run on request (the Stop control, the reply `stop`, from any replica).

A stop is kept in the thread's inbox like a message, and flagged on the record in the same
write, so it is applied once wherever it lands: the serve holding the thread sees the flag
before its next step (a decision, a tool call, the next model turn, the final post), and
since no release can pass over an inbox entry, a stop that arrives as the run pauses or
finishes is read by the next pass: a paused run is stopped (its pending calls not run), a
finished one is answered truthfully ("it had already finished")."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from bot.runtime import state_checks
from bot.runtime.envelope import (
    DecisionMade,
    Envelope,
    InboxPayload,
    StopRequest,
    UserMessage,
    parse_payload,
)
from bot.runtime.open_calls import STOPPED_BEFORE_IT_RAN
from bot.runtime.outcomes import Notice, NoticeKind, Refused, messages_were, quote
from bot.runtime.pass_results import Stopped, StopsAnswered
from storage import (
    CONSUME_LIMIT,
    KEEP,
    Commit,
    InboxEntry,
    LeaseLost,
    Status,
    ToolCallStatus,
)

if TYPE_CHECKING:
    from bot.runtime.envelope import Entries
    from bot.runtime.serving_view import ServingView

QUOTED = 10  # messages dropped by a stop that the notice names


async def stopped(
    serving: ServingView,
    consume: list[str],
    *,
    by: str | None = None,
    decided: dict[str, DecisionMade] | None = None,
) -> Stopped:
    """Someone asked the run to stop: it ends here. Its open calls are closed as the ledger
    says (a call that ran is said to have run; one armed but never started was stopped before
    it ran), the checkpoint is replaced by a finished one with the notice, messages that came
    for this run (held by its checkpoint, or in `consume`: given to it, not yet committed)
    are dropped and named, stop requests waiting in the inbox are consumed with
    it, and the next message starts a fresh run. Nothing of the run is posted after the
    notice. `decided`: who decided what so far, when not the serve's (decisions that came
    with the stop). Returns what the serve is left with (`Stopped`)."""
    record = serving.record
    who = by or (serving.keeper.stop_by if serving.keeper else None)
    envelope = await serving.saved_envelope()
    disarmed = await _cancel_armed(serving)
    closed = await state_checks.close_calls(serving, run=envelope)
    inbox = await serving.storage_calls(
        serving.store.read_inbox, serving.key, record.generation, CONSUME_LIMIT
    )
    quotes = [quote(held.text) for held in envelope.held] if envelope else []
    quotes += [quote(message.text) for message in _messages(inbox, consume)]
    lost = f" {closed.describe()}" if closed.all else ""
    unanswered = (
        f" {messages_were(len(quotes), 'sent for this run')} not answered:" if quotes else ""
    )
    notice = Notice(
        key=serving.key,
        kind=NoticeKind.STOPPED,
        text=f"Stopped by <@{who}>.{lost} Send a new message to start again.{unanswered}"
        if who
        else f"Stopped.{lost} Send a new message to start again.{unanswered}",
        settles=closed.undecided,
        details=quotes[:QUOTED],
    )
    decided = dict(serving.decided if decided is None else decided)
    for call in closed.not_run + closed.stopped + closed.approved:
        decided[call.call_id] = DecisionMade(approved=False, user=who or "", stopped=True)
    tombstone = Envelope(
        run_state={},
        started_by=envelope.started_by if envelope else "",
        finished=True,
        decided=decided,
    )
    waiting = _waiting_stops(inbox, consume)
    await serving.set_aside_state(
        tombstone,
        notice=notice,
        items=closed.items,
        consume=consume + waiting,
        release_as=Status.IDLE,
        clear_stop=True,
    )
    return Stopped(by=who or "", decided=decided, disarmed=disarmed)


async def stop_requests(
    serving: ServingView, entries: Entries, runnable: Envelope | None
) -> Stopped | StopsAnswered:
    """Stops read from the inbox in this pass. With a run to continue (paused for approval,
    interrupted), it is stopped: messages and clicks that came before the stop go with it;
    later messages are served next. Without one, each stopper is told it had finished
    (`StopsAnswered`: the pass goes on). `Stopped` when the run was stopped (the pass is
    over)."""
    first_arrived = entries.stop_arrived[0]
    if runnable is not None:
        before = [
            (entry_id, item)
            for entry_id, item, arrived in zip(
                entries.item_ids, entries.items, entries.arrived, strict=True
            )
            if arrived <= first_arrived
        ]
        who = entries.stops[0].user
        for _, item in before:
            if not isinstance(item, UserMessage):  # a click: moot now (a message is named)
                await serving.refuse(item, f"That call was stopped by <@{who}> before it ran.")
        consume = entries.stop_ids + [entry_id for entry_id, _ in before]
        applied = await stopped(serving, consume, by=who)
        return replace(applied, reread=True)  # what came after the stop is served next
    for stop in entries.stops:
        text = nothing_to_stop(serving.stopped_by)
        await serving.emit_now(
            Refused(key=serving.key, text=text, user=stop.user, reply_to=stop.reply_to)
        )
    await serving.storage_calls(
        serving.store.apply,
        Commit(
            key=serving.key,
            lease=serving.lease,
            consume=entries.stop_ids,
            checkpoint=KEEP,
            clear_stop=True,
        ),
    )
    entries.ids = [entry_id for entry_id in entries.ids if entry_id not in entries.stop_ids]
    return StopsAnswered()


async def _cancel_armed(serving: ServingView) -> frozenset[str]:
    """Calls this serve approved (with the commit that approved them) or claimed just
    before running them, and never started (the stop came first): the ledger says they did
    not run, rather than "outcome unknown". When the thread was taken from this serve
    meanwhile (a discard, which may have read a claimed call as started and said its
    outcome is unknown), the ledger is still set right, and the thread is told; an approved
    call is then its new holder's to settle (`LeaseLost`). Returns them: no longer the
    serve's to run."""
    armed = serving.armed.snapshot()
    for call_id in sorted(armed):
        try:
            held = await serving.storage_calls(
                serving.store.complete_tool_call,
                serving.lease,
                call_id,
                STOPPED_BEFORE_IT_RAN,
                status=ToolCallStatus.CANCELLED,
            )
        except LeaseLost:
            continue  # approved, not started: its new holder's (the others still are ours)
        if not held:
            await _tell_cancelled_late(serving, call_id)
    return armed


async def _tell_cancelled_late(serving: ServingView, call_id: str) -> None:
    record = await serving.storage_calls(
        serving.store.get_tool_call, serving.key, call_id, serving.record.generation
    )
    tool = record.tool_name if record is not None else "a tool"
    await serving.emit_now(
        Notice(
            key=serving.key,
            kind=NoticeKind.TOOL_FINISHED_LATE,
            text=f"`{tool}` (call {call_id}) was settled after this conversation's saved state "
            "was set aside: the run was stopped before the call started, so it never ran.",
        )
    )


def nothing_to_stop(stopped_by: str | None) -> str:
    """What a stop that found nothing to stop is answered (stopped by someone, or finished)."""
    if stopped_by:
        return f"It was already stopped by <@{stopped_by}>; nothing more to stop."
    return "It had already finished before your stop arrived; nothing was stopped."


def _waiting_stops(inbox: list[InboxEntry], consume: list[str]) -> list[str]:
    """Stop requests in the inbox (they asked for this very stop)."""
    found = [
        entry.entry_id
        for entry in inbox
        if entry.entry_id not in consume and isinstance(_payload(entry), StopRequest)
    ]
    return found[: CONSUME_LIMIT - len(consume)]


def _messages(inbox: list[InboxEntry], consume: list[str]) -> list[UserMessage]:
    """The messages among the entries this stop consumes: dropped with the run."""
    taken = set(consume)
    return [
        payload
        for entry in inbox
        if entry.entry_id in taken and isinstance(payload := _payload(entry), UserMessage)
    ]


def _payload(entry: InboxEntry) -> InboxPayload | None:
    try:
        return parse_payload(entry.payload)
    except ValueError:
        return None
