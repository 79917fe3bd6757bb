"""Verdicts on answers and stop requests, against both backends."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from storage import Commit, ConversationKey, FeedbackTally, InboxChanged, Status, Store, Verdict
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


def test_a_stop_is_kept_like_a_message_and_flagged_for_the_holder(store: Store) -> None:
    """The flag is for speed; the kept request is what no release can pass over."""
    stop = '{"kind":"stop","user":"U1"}'
    lease, _ = store.acquire(KEY, "w")
    seen = record_of(store, KEY).inbox_seq
    assert store.renew(lease).stop_by is None and store.stop_requested(KEY) is None
    assert store.keep(KEY, "stop1", stop, create=False, stop_by="U1").kept
    assert store.stop_requested(KEY) == "U1" and store.renew(lease).stop_by == "U1"
    with pytest.raises(InboxChanged):  # the holder cannot let go without reading it
        store.release(lease, status=Status.IDLE, inbox_seen=seen)
    [entry] = store.read_inbox(KEY)
    store.apply(Commit(key=KEY, lease=lease, consume=[entry.entry_id], clear_stop=True))
    assert store.stop_requested(KEY) is None
    # A free thread (a run paused for approval): the stop takes it, for its keeper to serve.
    store.release(lease, status=Status.AWAITING_APPROVAL)
    kept = store.keep(KEY, "stop2", stop, create=False, owner="w2", stop_by="U1")
    assert kept.lease is not None and kept.record is not None and kept.record.stop_by == "U1"
    store.release(kept.lease, status=Status.IDLE)
    assert record_of(store, KEY).stop_by is None


def test_a_keep_names_a_run_starter_only_where_there_is_none(store: Store) -> None:
    """Who started the run (`run_by`, whom a stop is authorised against) is what the
    thread's holder wrote: a reply kept while the run waits for approval, which takes the
    free thread, does not make its author the starter (issue 49: someone who never wrote
    in the thread replied, became `run_by`, and their `stop` stopped the run). Only a
    conversation's first message names one."""
    said = '{"user":"U1","text":"email Ana"}'
    first = store.keep(KEY, "m1", said, participant="U1", owner="w1")
    assert first.lease is not None and first.record is not None
    assert first.record.run_by == "U1"
    store.release(first.lease, status=Status.AWAITING_APPROVAL, run_by="U1")
    reply = store.keep(
        KEY, "m2", '{"user":"U2","text":"?"}', create=False, participant="U2", owner="w2"
    )
    assert reply.lease is not None and reply.record is not None  # it took the free thread
    assert reply.record.run_by == "U1" and record_of(store, KEY).run_by == "U1"
    assert store.keep(KEY, "m3", '{"user":"U3","text":"!"}', create=False, participant="U3").kept
    assert record_of(store, KEY).run_by == "U1"
    # The holder names whoever starts the next run (a fenced write of its own).
    store.apply(Commit(key=KEY, lease=reply.lease, run_by="U2", touch=False))
    assert record_of(store, KEY).run_by == "U2"
