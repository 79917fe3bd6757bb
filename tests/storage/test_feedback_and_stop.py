"""Verdicts on answers and stop requests, against both backends."""

from __future__ import annotations

import time
from datetime import timedelta

from storage import ConversationKey, FeedbackTally, Status, Store, Verdict
from testkit.runtime import record_of
from tests.conftest import Backend
from tests.storage.conftest import KEY

OTHER = ConversationKey(team="T1", channel="C2", thread_ts="1700000000.000200")


def test_one_verdict_per_person_and_answer_and_changes_move_the_counts(store: Store) -> None:
    store.release(store.acquire(KEY, "w")[0], status=Status.IDLE)
    store.release(store.acquire(OTHER, "w")[0], status=Status.IDLE)
    assert store.record_feedback(KEY, "a1", "U1", Verdict.GOOD) == FeedbackTally(good=1)
    assert store.record_feedback(KEY, "a1", "U1", Verdict.GOOD) == FeedbackTally(good=1)
    assert store.record_feedback(KEY, "a1", "U2", Verdict.BAD) == FeedbackTally(good=1, bad=1)
    # U1 changes their mind: one count moves from one side to the other.
    assert store.record_feedback(KEY, "a1", "U1", Verdict.BAD) == FeedbackTally(bad=2)
    assert store.record_feedback(KEY, "a2", "U1", Verdict.GOOD) == FeedbackTally(good=1, bad=2)
    assert store.record_feedback(OTHER, "a1", "U1", Verdict.GOOD) == FeedbackTally(good=1)
    assert record_of(store, KEY).feedback == FeedbackTally(good=1, bad=2)
    assert store.count_feedback() == FeedbackTally(good=2, bad=2)


def test_no_verdict_on_a_conversation_that_is_gone(backend: Backend) -> None:
    store = backend.open(state_ttl=timedelta(seconds=1))
    assert store.record_feedback(KEY, "a1", "U1", Verdict.GOOD) is None
    store.release(store.acquire(KEY, "w")[0], status=Status.IDLE)
    time.sleep(2.1)
    assert store.record_feedback(KEY, "a1", "U1", Verdict.GOOD) is None
    assert store.count_feedback() == FeedbackTally()


def test_a_stop_request_reaches_the_holder_on_renewal_and_release_clears_it(
    store: Store,
) -> None:
    assert store.request_stop(KEY, "U1") is None  # no such thread
    lease, _ = store.acquire(KEY, "w")
    assert store.renew(lease).stop_by is None
    asked = store.request_stop(KEY, "U1")
    assert asked is not None and asked.stop_by == "U1"
    assert store.renew(lease).stop_by == "U1"
    store.release(lease, status=Status.IDLE)
    assert record_of(store, KEY).stop_by is None
    assert store.request_stop(KEY, "U1") is None  # nothing holds it: nothing to stop
    lease, record = store.acquire(KEY, "w")
    assert record.stop_by is None and store.renew(lease).stop_by is None
