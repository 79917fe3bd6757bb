"""Delivering a conversation's outcomes: in order, each once, none forgotten.

A checkpoint's envelope carries the outcomes still owed to the thread (its outbox: any an
earlier checkpoint could not deliver, then its own). The record keeps a cursor: how many
entries of which checkpoint's outbox reached the user. A sink that fails transiently leaves
the rest for a later attempt, with backoff, a bounded number of times; a permanent failure
(the bot was removed from the channel, the message is invalid) skips that entry. Either way
the outcome is recorded on the record (`delivery_error`) and nothing delivered is posted
again: an entry whose earlier attempt may have landed is handed to the sink marked
`maybe_posted`, so the sink can look before posting."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.runtime.outcomes import DeliveryRef, Outcome, from_outbox, to_outbox
from storage import Conversation, DeliveryMark

log = logging.getLogger(__name__)
OutcomeSink = Callable[[Outcome, DeliveryRef], Awaitable[None]]
MAX_ATTEMPTS = 5


class DeliveryFailed(Exception):
    """Raised by a sink. `permanent`: retrying cannot help (e.g. `not_in_channel`)."""

    def __init__(self, reason: str, *, permanent: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.permanent = permanent


def backoff(attempts: int) -> timedelta:
    """5 s, 10 s, 20 s, ... up to 5 minutes."""
    return timedelta(seconds=min(5 * 2 ** max(attempts - 1, 0), 300))


@dataclass
class Owed:
    id: str
    outcome: Outcome
    maybe_posted: bool = False


class Outbox:
    """What one serving session owes its thread, and the cursor to record on release."""

    def __init__(
        self,
        sink: OutcomeSink | None,
        clock: Callable[[], datetime],
        horizon: timedelta | None = None,
    ) -> None:
        """`horizon`: how long the thread's state lives without activity; a retry is due well
        within it (a retry due after the state expired would never come)."""
        self.sink = sink
        self.clock = clock
        self.horizon = horizon
        self.version = -1  # the checkpoint whose outbox `owed` is the unsent tail of
        self.count = 0  # entries of that outbox already delivered (or given up on)
        self.owed: list[Owed] = []
        self.attempts = 0
        self.retry_at: datetime | None = None
        self.error: str | None = None
        self.changed = False  # a delivery cursor must be written
        self.unrecorded: list[Owed] = []  # delivered since the cursor was last written
        self._staged: tuple[int, list[Owed]] = (-1, [])

    # -- what is owed -------------------------------------------------------------------

    def load(self, record: Conversation, outbox: list[dict[str, object]]) -> None:
        """Take over what the committed checkpoint still owes (after a crash, a failed
        delivery or a restart): every such entry may have been posted already."""
        start = record.undelivered_from()
        self.version = record.checkpoint_version
        self.attempts = record.delivery_attempts
        self.error = record.delivery_error
        self.retry_at = record.delivery_retry_at
        if start is None:
            self.count, self.owed = len(outbox), []
            return
        self.count = start
        self.owed = []
        for index, entry in enumerate(outbox[start:], start=start):
            outbox_id, outcome = from_outbox(entry)
            self.owed.append(Owed(outbox_id or f"{self.version}.{index}", outcome, True))
        self.changed = True

    def loaded(self, version: int) -> bool:
        return self.version == version

    def for_commit(
        self, version: int, outcomes: list[Outcome], generation: int = 0
    ) -> list[dict[str, object]]:
        """The outbox to store with checkpoint `version`: what is still owed, then these.
        Their ids name the conversation's `generation` too: one that came back after its
        state expired counts its checkpoint versions from 1 again, in a thread that holds
        what the expired one posted (a redelivery looks there by id before posting)."""
        stem = f"{generation}.{version}" if generation else str(version)
        fresh = [Owed(f"{stem}.{i}", outcome) for i, outcome in enumerate(outcomes)]
        self._staged = (version, fresh)
        return [to_outbox(owed.outcome, owed.id) for owed in self.owed + fresh]

    def committed(self) -> None:
        """The checkpoint staged by `for_commit` is committed: its outbox is now owed."""
        version, fresh = self._staged
        self.owed = self.owed + fresh
        self.unrecorded = []  # the commit's outbox leaves out what was delivered
        self.version, self.count = version, 0
        self.changed = True

    @property
    def pending(self) -> bool:
        return bool(self.owed)

    # -- delivering ---------------------------------------------------------------------

    async def deliver(self) -> bool:
        """Deliver what is owed, in order. False when a transient failure left some of it
        for a later attempt (`retry_at`)."""
        if self.owed and self.retry_at is not None and self.clock() < self.retry_at:
            return False  # backing off after a failure: a later serve tries again
        while self.owed:
            owed = self.owed[0]
            try:
                if self.sink is not None:
                    await self.sink(owed.outcome, DeliveryRef(owed.id, owed.maybe_posted))
            except DeliveryFailed as failure:
                if not failure.permanent:
                    return self._failed(owed, failure.reason)
                log.error("%s: %s undeliverable: %s", owed.outcome.key, owed.id, failure.reason)
                self.error = failure.reason
            except Exception as exc:
                log.exception("%s: delivering %s failed", owed.outcome.key, owed.id)
                return self._failed(owed, type(exc).__name__)
            self.unrecorded.append(self.owed.pop(0))
            self.count += 1
            self.changed = True
        self.attempts, self.retry_at = 0, None
        return True

    async def recheck(self) -> None:
        """The thread was taken from this serve before its deliveries were recorded: the
        next holder may deliver them again (a post still in flight here cannot be seen by
        its read-back), so the sink looks once more for copies of each, later."""
        unrecorded, self.unrecorded = self.unrecorded, []
        if self.sink is None:
            return
        for owed in unrecorded:
            try:
                await self.sink(owed.outcome, DeliveryRef(owed.id, True, recheck=True))
            except Exception:  # a look for copies; the thread is another serve's now
                log.warning("%s: could not look again for %s", owed.outcome.key, owed.id)

    def _failed(self, owed: Owed, reason: str) -> bool:
        owed.maybe_posted = True  # the post may have landed although the answer was lost
        self.attempts += 1
        self.error = reason
        self.changed = True
        if self.attempts >= MAX_ATTEMPTS:
            log.error(
                "%s: giving up on %d outcomes after %d attempts: %s",
                owed.outcome.key,
                len(self.owed),
                self.attempts,
                reason,
            )
            self.error = f"gave up after {self.attempts} attempts: {reason}"
            self.count += len(self.owed)
            self.owed = []
            self.attempts, self.retry_at = 0, None
            return True
        delay = backoff(self.attempts)
        if self.horizon is not None:
            delay = min(delay, self.horizon / 3)
        self.retry_at = self.clock() + delay
        return False

    async def emit_now(self, outcome: Outcome) -> None:
        """An outcome that is not recorded (an answer to one request): best effort."""
        if self.sink is None:
            return
        try:
            await self.sink(outcome, DeliveryRef())
        except Exception as exc:  # it answered one request; the conversation is unaffected
            log.warning("%s: could not deliver %s: %s", outcome.key, type(outcome).__name__, exc)

    def mark(self) -> DeliveryMark | None:
        """The cursor to record, or None when there is nothing new to say."""
        if not self.changed or self.version < 0:
            return None
        return DeliveryMark(
            version=self.version,
            count=self.count if self.owed else None,
            attempts=self.attempts,
            retry_at=self.retry_at,
            error=self.error,
        )
