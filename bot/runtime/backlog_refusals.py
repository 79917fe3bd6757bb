"""Messages a thread could not take because its backlog is full (`BOT_BACKLOG_LIMIT`): each
was acknowledged but not kept, so the thread is told which, in one notice per burst rather
than one per message.

The write that refused a message recorded it on the thread's record (`Conversation.refused`),
so the notice survives its process: the process that refused the messages tells them after
`GATHER_SECONDS`, then marks them told (`Store.refusals_told`); whoever serves the thread
next tells those still untold `TELL_AFTER` their refusal (`tell_untold`: recovery after a
crash, or the holder whose release saw the refusal), except those a live teller in its own
process still has. Both name the notice after the refusals it tells (`delivery_id`), so a
second teller of the same burst (whose first teller posted, then died before marking it
told) finds that post in the thread instead of posting it again, while a notice that names
more than an earlier one is a post of its own, never taken for a copy of it and deleted.
Both also post as a teller that may not be the first (`maybe_posted`): the live one too,
because its process may be frozen past `TELL_AFTER` (a SIGSTOP, a long GC pause) while a
serve elsewhere tells the same burst; it then finds that post, or, its own post being
already on its way, the Slack layer deletes the later copy (chaos seed 620256)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import timedelta

from bot.runtime.delivery import DeliveryFailed, OutcomeSink
from bot.runtime.outcomes import DeliveryRef, Notice, NoticeKind, quote, quoted_then_counted
from storage import Conversation, ConversationKey, Refusal, StorageError, Store
from storage.calls import StorageCalls
from storage.models import with_refusals_told

log = logging.getLogger(__name__)
GATHER_SECONDS = 1.0  # refusals this close together are told in one notice
TELL_AFTER = timedelta(seconds=5)  # untold this long: its process is gone, or failed to post
QUOTED = 10


@dataclass(frozen=True)
class Untold:
    """One refused message, and whether the record names it (else it only counts it)."""

    refusal: Refusal
    named: bool


class BacklogRefusals:
    """The refusals this process made, gathered per thread and told together."""

    def __init__(
        self, sink: Callable[[], OutcomeSink | None], store: Store, storage_calls: StorageCalls
    ) -> None:
        self.sink = sink
        self.store = store
        self.storage_calls = storage_calls
        self._waiting: dict[ConversationKey, list[Untold]] = {}
        self._timers: dict[ConversationKey, asyncio.TimerHandle] = {}
        self._telling: set[asyncio.Task[bool]] = set()
        self.telling: set[str] = set()  # event ids this process has yet to tell

    def add(self, key: ConversationKey, refusal: Refusal, *, named: bool) -> None:
        self._waiting.setdefault(key, []).append(Untold(refusal, named))
        self.telling.add(refusal.event_id)
        if key not in self._timers:
            loop = asyncio.get_running_loop()
            self._timers[key] = loop.call_later(GATHER_SECONDS, self._tell_later, key)

    async def flush(self) -> None:
        """Tell every thread now (a graceful shutdown)."""
        for key in list(self._timers):
            self._timers[key].cancel()
            self._tell_later(key)
        if self._telling:
            await asyncio.gather(*self._telling, return_exceptions=True)

    def _tell_later(self, key: ConversationKey) -> None:
        self._timers.pop(key, None)
        untold = self._waiting.pop(key, [])
        if not untold:
            return
        task = asyncio.create_task(self._tell(key, untold))
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)

    async def _tell(self, key: ConversationKey, untold: list[Untold]) -> bool:
        try:
            return await tell(
                self.sink(),
                self.store,
                self.storage_calls,
                key,
                [u.refusal for u in untold],
                named=[u.refusal.event_id for u in untold if u.named],
                counted=sum(1 for u in untold if not u.named),
            )
        finally:  # told, or left on the record for the thread's holder
            self.telling.difference_update(u.refusal.event_id for u in untold)


async def tell(
    sink: OutcomeSink | None,
    store: Store,
    storage_calls: StorageCalls,
    key: ConversationKey,
    refusals: Sequence[Refusal],
    *,
    more: int = 0,
    named: Sequence[str],
    counted: int,
) -> bool:
    """Post one notice for these refusals (and `more` known only by number), then mark them
    told; False when the post failed (they stay untold, for a later teller). Posted as
    maybe posted already: another teller may have told the same burst (the module's doc)."""
    if not refusals and not more:
        return True
    told = notice(key, refusals, more)
    try:
        if sink is not None:
            whose = [r.event_id for r in refusals if r.event_id not in named]
            await sink(told, DeliveryRef(delivery_id(named, counted, whose), maybe_posted=True))
    except DeliveryFailed as failure:
        if not failure.permanent:
            log.warning("%s: telling %d refusals failed: %s", key, len(refusals), failure.reason)
            return False
        log.error("%s: refusals undeliverable: %s", key, failure.reason)
    except Exception:
        log.exception("%s: telling %d refusals failed", key, len(refusals))
        return False
    try:
        await storage_calls(store.refusals_told, key, list(named), counted)
    except StorageError:  # told, but not marked: a later teller looks before posting
        log.warning("%s: could not mark %d refusals told", key, len(refusals), exc_info=True)
        return False
    return True


async def tell_untold(
    sink: OutcomeSink | None,
    store: Store,
    storage_calls: StorageCalls,
    record: Conversation,
    *,
    idle: bool,
    telling: Collection[str] = (),
) -> tuple[Conversation, bool]:
    """Tell the refusals `record` holds that no process told within `TELL_AFTER` (their
    process died, or its post failed), except those this process is `telling` itself;
    returns the record with what is still untold. Younger ones are left to their process,
    unless the serve is `idle` (about to let the thread go): then it waits until they are
    due, so that none is left untold if that process is gone (refusals made meanwhile move
    `inbox_seq`: the release sends the serve round again). The record is read again before
    waiting and before telling: the one a serve holds may be older than the telling it
    would wait for or repeat. Also says whether this call posted a notice."""
    others = [r for r in record.refused if r.event_id not in telling]
    counted = record.refused_more if not telling else 0  # whose they are is not known
    if not others and not counted:
        return record, False
    now = store.clock()
    young = [r for r in others if r.at + TELL_AFTER > now]
    if young and not idle and len(young) == len(others):
        return record, False  # not due yet; a later pass, or the release, looks again
    record = await _reread(store, storage_calls, record)
    young = [r for r in record.refused if r.at + TELL_AFTER > now and r.event_id not in telling]
    if young and idle:  # (told meanwhile by their process, they are not waited for: 180065)
        youngest = max(r.at for r in young)
        await asyncio.sleep(max((youngest + TELL_AFTER - now).total_seconds(), 0))
        record = await _reread(store, storage_calls, record)
    now = store.clock()
    due = [r for r in record.refused if r.at + TELL_AFTER <= now and r.event_id not in telling]
    every = len(due) == len(record.refused) and not telling
    more = record.refused_more if every else 0
    if not due and not more:
        return record, False
    told = await tell(
        sink,
        store,
        storage_calls,
        record.key,
        due,
        more=more,
        named=[r.event_id for r in due],
        counted=more,
    )
    if not told:
        return record, False
    return with_refusals_told(record, [r.event_id for r in due], more), True


async def _reread(store: Store, storage_calls: StorageCalls, record: Conversation) -> Conversation:
    """`record` with the refusals the store holds now."""
    fresh = await storage_calls(store.get, record.key)
    if fresh is None:
        return record.model_copy(update={"refused": [], "refused_more": 0})
    return record.model_copy(update={"refused": fresh.refused, "refused_more": fresh.refused_more})


def delivery_id(named: Collection[str], counted: int, whose: Collection[str] = ()) -> str:
    """The outbox id of the notice telling these refusals (the named ones' event ids, and
    how many more it counts): the same for the same refusals, whoever tells them. A notice
    that names none (each refusal only counted, the record's list being full) would share
    its id with any other such notice, and a later one be deleted as its copy (chaos
    150262): it takes the event ids of those it counts (`whose`, known to the process that
    refused them), or, told by a serve that knows only their number, an id of its own."""
    told = "\n".join(sorted(named)) + f"\n{counted}"
    if not named:
        told += "".join(f"\n~{event_id}" for event_id in sorted(whose)) or f"\n~{uuid.uuid4()}"
    return f"not_taken.{hashlib.sha256(told.encode()).hexdigest()[:16]}"


def notice(key: ConversationKey, refusals: Sequence[Refusal], more: int = 0) -> Notice:
    """One notice naming the refused messages: quoted (the first `QUOTED`), then counted."""
    people = sorted({r.user for r in refusals if r.user})
    count = len(refusals) + more
    authors = ", ".join(f"<@{user}>" for user in people)
    if more and authors:
        authors += " and others"
    return Notice(
        key=key,
        kind=NoticeKind.NOT_TAKEN,
        text=f"I couldn't take {count} message{'s' if count != 1 else ''}"
        + (f" (from {authors})" if authors else "")
        + ": too many messages are waiting for an answer in this thread already. Please send "
        f"{'them' if count != 1 else 'it'} again once I have answered:",
        details=quoted_then_counted([quote(r.text) for r in refusals], count, QUOTED),
    )
