"""A conversation's outbox (`bot.runtime.delivery.Outbox`): what is owed after a restart,
what a commit carries, and delivering in order with backoff, skipping and giving up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.runtime import Answer, Notice, NoticeKind
from bot.runtime.delivery import MAX_ATTEMPTS, DeliveryFailed, Outbox, backoff
from bot.runtime.outcomes import DeliveryRef, Outcome, to_outbox
from storage import Conversation, ConversationKey, DeliveryMark
from testkit.pointers import checkpoint_pointer

KEY = ConversationKey(team="T1", channel="C1", thread_ts="1700000000.000100")
START = datetime(2025, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class Sink:
    """Records what it is handed; answers each call with the next of `failures` (None:
    delivered), then delivers."""

    def __init__(self, *failures: Exception | None) -> None:
        self.failures = list(failures)
        self.handed: list[tuple[str, DeliveryRef]] = []
        self.delivered: list[str] = []

    async def __call__(self, outcome: Outcome, ref: DeliveryRef) -> None:
        text = getattr(outcome, "text", "")
        self.handed.append((text, ref))
        failure = self.failures.pop(0) if self.failures else None
        if failure is not None:
            raise failure
        self.delivered.append(text)


def answer(text: str) -> Answer:
    return Answer(key=KEY, text=text)


def record(version: int, delivered_version: int, delivered_count: int | None) -> Conversation:
    pointer = checkpoint_pointer(f"checkpoints/v{version}", version, created_at=START)
    return Conversation(
        key=KEY,
        checkpoint=pointer,
        delivered_version=delivered_version,
        delivered_count=delivered_count,
        delivery_attempts=1,
        delivery_error="ratelimited",
        created_at=START,
        updated_at=START,
        last_activity_at=START,
        expires_at=START + timedelta(days=7),
    )


OUTBOX = [
    to_outbox(answer("one"), "3.0"),
    to_outbox(answer("two"), "3.1"),
    to_outbox(answer("three"), ""),
]


def test_load_takes_over_what_the_record_says_is_undelivered() -> None:
    outbox = Outbox(None, Clock())
    outbox.load(record(3, delivered_version=3, delivered_count=1), OUTBOX)
    assert [(o.id, o.outcome, o.maybe_posted) for o in outbox.owed] == [
        ("3.1", answer("two"), True),
        ("3.2", answer("three"), True),  # an entry without an id is named by its place
    ]
    assert (outbox.version, outbox.count, outbox.attempts) == (3, 1, 1)
    assert outbox.error == "ratelimited" and outbox.pending and outbox.loaded(3)
    assert outbox.mark() == DeliveryMark(version=3, count=1, attempts=1, error="ratelimited")


def test_load_of_an_older_cursor_owes_everything_and_of_a_complete_one_nothing() -> None:
    older = Outbox(None, Clock())
    older.load(record(3, delivered_version=2, delivered_count=None), OUTBOX)
    assert [o.id for o in older.owed] == ["3.0", "3.1", "3.2"] and older.count == 0
    done = Outbox(None, Clock())
    done.load(record(3, delivered_version=3, delivered_count=None), OUTBOX)
    assert done.owed == [] and done.count == 3 and not done.pending
    assert done.mark() is None  # nothing new to record


def test_for_commit_carries_what_is_still_owed() -> None:
    outbox = Outbox(None, Clock())
    outbox.load(record(3, delivered_version=3, delivered_count=2), OUTBOX)
    entries = outbox.for_commit(4, [answer("four"), answer("five")])
    assert [(e["id"], e["text"]) for e in entries] == [
        ("3.2", "three"),
        ("4.0", "four"),
        ("4.1", "five"),
    ]
    assert outbox.version == 3  # until the commit lands
    outbox.committed()
    assert (outbox.version, outbox.count) == (4, 0)
    assert [(o.id, o.maybe_posted) for o in outbox.owed] == [
        ("3.2", True),
        ("4.0", False),
        ("4.1", False),
    ]
    assert outbox.mark() == DeliveryMark(version=4, count=0, attempts=1, error="ratelimited")


async def test_deliver_in_order_then_the_cursor_says_all() -> None:
    sink = Sink()
    outbox = Outbox(sink, Clock())
    outbox.for_commit(1, [answer("a"), Notice(key=KEY, kind=NoticeKind.QUEUED, text="b")])
    outbox.committed()
    assert await outbox.deliver() is True
    assert sink.delivered == ["a", "b"]
    assert [ref for _, ref in sink.handed] == [DeliveryRef("1.0"), DeliveryRef("1.1")]
    assert outbox.mark() == DeliveryMark(version=1, count=None, attempts=0)


async def test_a_transient_failure_backs_off_then_retries_marked_maybe_posted() -> None:
    clock = Clock()
    sink = Sink(DeliveryFailed("ratelimited", permanent=False))
    outbox = Outbox(sink, clock)
    outbox.for_commit(1, [answer("a"), answer("b")])
    outbox.committed()
    assert await outbox.deliver() is False
    assert sink.delivered == [] and outbox.count == 0
    assert (outbox.attempts, outbox.error) == (1, "ratelimited")
    assert outbox.retry_at == START + timedelta(seconds=5)
    assert outbox.mark() == DeliveryMark(
        version=1, count=0, attempts=1, retry_at=START + timedelta(seconds=5), error="ratelimited"
    )
    clock.now += timedelta(seconds=4)
    assert await outbox.deliver() is False  # still backing off: the sink is not called
    assert len(sink.handed) == 1
    clock.now += timedelta(seconds=1)
    assert await outbox.deliver() is True
    assert sink.delivered == ["a", "b"]
    assert sink.handed[1] == ("a", DeliveryRef("1.0", maybe_posted=True))
    assert sink.handed[2] == ("b", DeliveryRef("1.1", maybe_posted=False))
    assert outbox.attempts == 0 and outbox.retry_at is None


async def test_an_unexpected_error_counts_as_transient() -> None:
    outbox = Outbox(Sink(ConnectionResetError("reset")), Clock())
    outbox.for_commit(1, [answer("a")])
    outbox.committed()
    assert await outbox.deliver() is False
    assert (outbox.attempts, outbox.error) == (1, "ConnectionResetError")


async def test_a_permanent_failure_skips_that_entry_and_goes_on() -> None:
    sink = Sink(DeliveryFailed("not_in_channel", permanent=True))
    outbox = Outbox(sink, Clock())
    outbox.for_commit(1, [answer("a"), answer("b")])
    outbox.committed()
    assert await outbox.deliver() is True
    assert sink.delivered == ["b"] and not outbox.pending
    assert outbox.mark() == DeliveryMark(version=1, count=None, error="not_in_channel")


async def test_giving_up_after_max_attempts() -> None:
    clock = Clock()
    sink = Sink(*[DeliveryFailed("fatal_error", permanent=False)] * MAX_ATTEMPTS)
    outbox = Outbox(sink, clock)
    outbox.for_commit(1, [answer("a"), answer("b")])
    outbox.committed()
    for attempt in range(1, MAX_ATTEMPTS):
        assert await outbox.deliver() is False
        assert outbox.attempts == attempt
        assert outbox.retry_at is not None
        clock.now = outbox.retry_at
    assert await outbox.deliver() is True
    assert sink.delivered == [] and not outbox.pending
    assert outbox.count == 2  # both given up on: the cursor moves past them
    assert outbox.error == f"gave up after {MAX_ATTEMPTS} attempts: fatal_error"
    assert outbox.mark() == DeliveryMark(version=1, count=None, error=outbox.error)


@pytest.mark.parametrize(
    ("attempts", "seconds"), [(0, 5), (1, 5), (2, 10), (3, 20), (6, 160), (7, 300), (50, 300)]
)
def test_backoff_doubles_up_to_five_minutes(attempts: int, seconds: int) -> None:
    assert backoff(attempts) == timedelta(seconds=seconds)


async def test_emit_now_is_best_effort() -> None:
    sink = Sink(RuntimeError("down"))
    outbox = Outbox(sink, Clock())
    await outbox.emit_now(answer("a"))  # no exception
    await outbox.emit_now(answer("b"))
    assert sink.delivered == ["b"]
    assert [ref for _, ref in sink.handed] == [DeliveryRef(), DeliveryRef()]
    assert outbox.mark() is None  # not recorded
    await Outbox(None, Clock()).emit_now(answer("c"))  # no sink: nothing to do


async def test_without_a_sink_everything_counts_as_delivered() -> None:
    outbox = Outbox(None, Clock())
    outbox.for_commit(2, [answer("a")])
    outbox.committed()
    assert await outbox.deliver() is True
    assert outbox.mark() == DeliveryMark(version=2, count=None)


async def test_a_retry_is_due_well_within_the_states_lifetime() -> None:
    """With a short TTL the backoff is cut to a third of it: a retry due after the state
    expired would never come (chaos 150047, TTL 5 s: the first retry was due at the very
    moment the state expired)."""
    clock = Clock()
    outbox = Outbox(Sink(DeliveryFailed("http_503", permanent=False)), clock, timedelta(seconds=6))
    outbox.for_commit(1, [answer("a")])
    outbox.committed()
    assert await outbox.deliver() is False
    assert outbox.retry_at == START + timedelta(seconds=2)
