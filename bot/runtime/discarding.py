"""Operators' care of conversations: discarding saved state.

Discard takes the lease (from a live holder too, unless it is a stale sweep: fencing stops
the old holder's writes), closes the history's open calls as the tool ledger says, drops the
queued and held messages (and counts them), tells each stop it consumes that the discard
ended the run first, and replaces the checkpoint by a finished one carrying the notice. The
history is kept. A message that arrives while the discard holds the thread is not lost: the
release sees it (`InboxChanged`) and the thread serves it as a new run. A stale sweep
re-checks status and age after taking each lease; a discard from a listing an admin was
shown (the Home tab's) also re-checks that nothing happened since (`Listed`). A workspace
that removed the app has every conversation that could still run or resume discarded at
once (`discard_team`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict

from bot.runtime import state_checks
from bot.runtime.envelope import Entries, Envelope
from bot.runtime.lease_owner import new_owner
from bot.runtime.outcomes import (
    Discarded,
    Notice,
    NoticeKind,
    Outcome,
    Refused,
    messages_were,
    quote,
    quoted_then_counted,
)
from bot.runtime.runtime_parts import RuntimeParts
from bot.runtime.serving import Serving
from storage import (
    CONSUME_LIMIT,
    KEEP,
    Commit,
    Conversation,
    ConversationKey,
    LeaseBusy,
    NotFound,
    Status,
)

# What a workspace that removed the app may still have running or waiting to resume.
UNFINISHED = (
    Status.RUNNING,
    Status.AWAITING_APPROVAL,
    Status.INTERRUPTED,
    Status.SET_ASIDE,
)
TEAM_SWEEP_CONCURRENCY = 8
QUOTED = 10  # dropped messages the notice names


class Listed(BaseModel):
    """A conversation as a listing showed it to an admin (the Home tab's stale ones): a
    discard asked from that listing goes ahead only while it is still so. Whatever happened
    there since changes one of these: a message or a decision grows `inbox_seq` (and makes
    it `running`), a run or a `/resume` moves its activity or its status, an expiry its
    generation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: ConversationKey
    status: Status
    activity_ms: int
    inbox_seq: int
    generation: int

    @classmethod
    def of(cls, record: Conversation) -> Listed:
        return cls(
            key=record.key,
            status=record.status,
            activity_ms=round(record.last_activity_at.timestamp() * 1000),
            inbox_seq=record.inbox_seq,
            generation=record.generation,
        )


@dataclass(frozen=True)
class StaleFilter:
    """What `discard` re-checks after taking the lease: the conversation is still in one of
    `statuses` and idle for longer than `older_than`; and, when the discard was asked from
    a listing (`listed`), unchanged since it was listed."""

    statuses: tuple[Status, ...]
    older_than: timedelta
    listed: Listed | None = None

    def holds(self, record: Conversation, now: datetime) -> bool:
        if record.status not in self.statuses or now - record.last_activity_at <= self.older_than:
            return False
        return self.listed is None or Listed.of(record) == self.listed


async def discard_conversation(
    parts: RuntimeParts,
    key: ConversationKey,
    *,
    by: str | None,
    only_if: StaleFilter | None = None,
) -> list[Outcome]:
    gone = [Refused(key=key, text="There is no conversation in that thread.")]
    try:
        lease, record = await parts.storage_calls(
            parts.store.acquire, key, new_owner(parts.process), create=False, force=only_if is None
        )
    except NotFound:
        return list(gone)
    except LeaseBusy:
        return []  # a stale sweep leaves a thread that is active right now alone
    if only_if is not None and not only_if.holds(record, parts.store.clock()):
        await parts.storage_calls(parts.store.release, lease, touch=False)
        return []
    serving = Serving(parts, lease, record)
    discarded: list[Outcome] = []

    async def opening() -> None:
        discarded.append(await _discard(serving, by))

    outcomes = await serving.run(opening)
    return [*discarded, *outcomes]  # what was discarded first, then what the thread was told


async def discard_team(
    parts: RuntimeParts,
    team: str | None,
    enterprise: str | None,
    *,
    started_before: datetime | None = None,
) -> list[ConversationKey]:
    """Discard every unfinished conversation of a workspace (every workspace of `enterprise`
    when `team` is None), live holders included: their next write is fenced off, so nothing
    of theirs goes on. With `started_before`, only conversations (generations) begun before
    then: a workspace that installed the app again keeps what it began since. Returns the
    keys discarded."""
    found = await parts.storage_calls(
        parts.store.list_by_team, team, enterprise=enterprise, statuses=UNFINISHED
    )
    if started_before is not None:
        found = [record for record in found if began(record) < started_before]
    gate = asyncio.Semaphore(TEAM_SWEEP_CONCURRENCY)

    async def one(key: ConversationKey) -> ConversationKey | None:
        async with gate:
            outcomes = await discard_conversation(parts, key, by=None)
        return key if any(isinstance(o, Discarded) for o in outcomes) else None

    done = await asyncio.gather(*(one(record.key) for record in found))
    return [key for key in done if key is not None]


def began(record: Conversation) -> datetime:
    """When the conversation's current generation began (its creation time)."""
    if record.generation:
        return datetime.fromtimestamp(record.generation / 1000, tz=UTC)
    return record.created_at


async def _discard(serving: Serving, by: str | None) -> Discarded:
    record = serving.record
    previous = serving.record.status
    inbox = await serving.storage_calls(serving.store.read_inbox, serving.key, record.generation)
    entries = Entries(inbox)
    ids = entries.ids
    while len(ids) > CONSUME_LIMIT:  # a backlog beyond one commit: drop it in chunks first
        chunk, ids = ids[:CONSUME_LIMIT], ids[CONSUME_LIMIT:]
        await serving.storage_calls(
            serving.store.apply,
            Commit(key=serving.key, lease=serving.lease, consume=chunk, checkpoint=KEEP),
        )
    envelope = await serving.saved_envelope()
    quotes = [quote(held.text) for held in envelope.held] if envelope else []
    quotes += [quote(message.text) for message in entries.messages]
    closed = await state_checks.close_calls(serving, run=envelope)
    dropped = len(quotes)
    who = _who(by)
    lost = closed.describe() or "No tool call was pending."
    messages = (
        f" {messages_were(dropped, 'waiting for an answer')} dropped; send "
        f"{'them' if dropped != 1 else 'it'} again if you still need an answer:"
        if dropped
        else ""
    )
    notice = Notice(
        key=serving.key,
        kind=NoticeKind.DISCARDED,
        text=f"{who} discarded this conversation's saved state. {lost} The history is kept; "
        f"send a new message to start over.{messages}",
        settles=closed.undecided,
        details=quoted_then_counted(quotes, dropped, QUOTED),
    )
    old = record.checkpoint
    tombstone = Envelope(
        run_state={},
        started_by=envelope.started_by if envelope else "",
        finished=True,
        decided=envelope.decided if envelope else {},
    )
    await serving.set_aside_state(
        tombstone,
        notice=notice,
        items=closed.items,
        consume=ids,
        status=Status.DISCARDED,
        release_as=Status.DISCARDED,
    )
    for stop in entries.stops:  # kept for the holder, which will never serve them now
        await serving.emit_now(
            Refused(
                key=serving.key, text=stop_overtaken(by), user=stop.user, reply_to=stop.reply_to
            )
        )
    return Discarded(
        key=serving.key,
        removed_checkpoint=old.object_key if old else None,
        pending_calls=closed.not_run + closed.approved,  # none of them ran
        ran_calls=closed.ran,
        unknown_calls=closed.unknown,
        dropped_messages=dropped,
        previous_status=previous,
    )


def stop_overtaken(by: str | None) -> str:
    """What a stop that a discard consumed is answered: the discard ended the run first."""
    return (
        f"{_who(by)} discarded this conversation's saved state before your stop was applied; "
        "nothing runs there now."
    )


def _who(by: str | None) -> str:
    return f"An admin (<@{by}>)" if by else "An operator"
