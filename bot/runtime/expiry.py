"""Telling a thread that its conversation's saved state expired.

A conversation's state lasts `BOT_STATE_TTL` after its last activity; its record outlives it
as a tombstone (`BOT_TOMBSTONE_TTL`). The first event in the thread after the expiry (a reply,
a click, a Stop, a `/resume`, a mention) brings the thread back as a new conversation that
says what expired (`Conversation.expired_from`); whoever serves it first says so in the
thread, once, in a recorded notice (delivered even after a crash): what was waiting was not
run, its approval cards are closed, messages that were never answered are named. Nothing that
arrived for the expired state runs: clicks are refused privately, replies are not answered.
A mention (or a DM) that came with it starts the fresh conversation right after."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bot.runtime.envelope import DecisionRequest, Envelope, UserMessage, parse_payload
from bot.runtime.outcomes import (
    Notice,
    NoticeKind,
    PendingCall,
    messages_were,
    quote,
    quoted_then_counted,
)
from bot.runtime.pass_results import Settled
from bot.runtime.state_checks import human_age
from storage import CheckpointError, CheckpointPointer, Expiry, Status

if TYPE_CHECKING:
    from bot.runtime.envelope import Entries
    from bot.runtime.serving_view import ServingView

log = logging.getLogger(__name__)
EXPIRED = (
    "That request has expired: this conversation's saved state is gone (it is kept for a "
    "while after the last activity). Nothing was run."
)
QUOTED = 10  # unanswered messages named in the notice


async def announce(serving: ServingView, entries: Entries) -> Settled:
    gone = serving.record.expired_from
    assert gone is not None
    envelope = await _expired_envelope(serving, gone.checkpoint)
    waiting = envelope.humans if envelope else []
    pending = [PendingCall(**c.model_dump(exclude={"human", "asked_at"})) for c in waiting]
    unanswered = _quotes(gone, envelope)
    more = gone.dropped_more  # kept too, not quoted: storage keeps only the first few
    fresh: list[str] = []  # mentions and DMs: they start the new conversation
    consume: list[str] = []
    for entry_id, item in zip(entries.item_ids, entries.items, strict=True):
        if isinstance(item, DecisionRequest):
            await serving.refuse(item, EXPIRED)
        elif item.addressed:
            fresh.append(entry_id)
            continue
        else:
            unanswered.append(quote(item.text))
        consume.append(entry_id)
    consume += [entry_id for entry_id in entries.ids if entry_id not in entries.item_ids]
    notice = Notice(
        key=serving.key,
        kind=NoticeKind.STATE_EXPIRED,
        text=expiry_text(gone, pending, len(unanswered) + more),
        settles=pending,
        closes_cards=True,
        details=quoted_then_counted(unanswered, len(unanswered) + more, QUOTED),
    )
    log.info("%s: state expired at %s; the thread is told", serving.key, gone.expired_at)
    await serving.commit(
        Envelope(run_state={}, started_by="", finished=True),
        consume=consume,
        outcomes=[notice],
        clear_expiry=True,
    )
    # The fresh messages are served next, as the new conversation's first.
    return Settled(Status.IDLE, reread=bool(fresh))


def expiry_text(gone: Expiry, pending: list[PendingCall], unanswered: int) -> str:
    idle = gone.expired_at - gone.last_activity_at
    what = {
        Status.AWAITING_APPROVAL: (
            "Nothing that was waiting was run: "
            + (
                ", ".join(f"`{call.tool_name}`" for call in pending) + " (waiting for approval)"
                if pending
                else "the request waiting for approval"
            )
            + " was not run, and its request is closed."
        ),
        Status.RUNNING: "The run in progress was not continued, and nothing of it ran again.",
        Status.INTERRUPTED: "The interrupted run was not continued.",
    }.get(gone.status, "Nothing pending was run.")
    lost = f" {messages_were(unanswered, 'sent here')} not answered:" if unanswered else ""
    return (
        f"This conversation's saved state expired: it is kept for {human_age(idle)} after "
        f"the last activity, and there was none here since "
        f"{gone.last_activity_at:%Y-%m-%d %H:%M} UTC. {what} The agent remembers only what "
        f"this thread shows; send a new message to start again.{lost}"
    )


async def _expired_envelope(
    serving: ServingView, pointer: CheckpointPointer | None
) -> Envelope | None:
    """The expired state's envelope while its object lasts (to name what was waiting)."""
    if pointer is None:
        return None
    try:
        document = await serving.storage_calls(serving.store.load_checkpoint, pointer)
        return Envelope.model_validate(document)
    except (CheckpointError, ValueError):
        return None  # gone with the state, as it should be


def _quotes(gone: Expiry, envelope: Envelope | None) -> list[str]:
    """Messages kept for the expired state and never answered."""
    texts = [held.text for held in envelope.held] if envelope else []
    for payload in gone.dropped:
        try:
            item = parse_payload(payload)
        except ValueError:
            continue
        if isinstance(item, UserMessage):
            texts.append(item.text)
    return [quote(text) for text in texts]
