"""A busy thread's backlog: every message is kept while a run holds the thread, however
many and however big, up to a cap past which a keep is refused (never an error); it is read
back in arrival order, a bounded page at a time, and consumed in chunks. On aws a busy
thread's record stays small (its further messages and their claims are rows), so the cost of
one keep stays flat however long the backlog: measured in DynamoDB's write units."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from storage import CONSUME_LIMIT, Commit, Lease, Store
from storage.aws import AwsStore
from storage.aws.layout import meta_key
from storage.models import REFUSAL_TEXT, REFUSALS_NAMED
from storage.writes import DROPPED_KEPT
from tests.conftest import Backend
from tests.storage.conftest import KEY, clocked


def payload(i: int, size: int = 20) -> str:
    text = f"{i:06d}".ljust(size, "x")
    return json.dumps({"user": "U2", "text": text}, separators=(",", ":"))


def hold(store: Store) -> Lease:
    """A run holds the thread (its first message took it)."""
    kept = store.keep(KEY, "first", payload(-1), owner="holder", participant="U1")
    assert kept.lease is not None
    return kept.lease


def drain(store: Store, lease: Lease) -> list[str]:
    """Consume the whole backlog the way a holder does: the oldest page, then the next."""
    seen: list[str] = []
    while page := store.read_inbox(KEY, lease.generation, CONSUME_LIMIT + 1):
        chunk = page[:CONSUME_LIMIT]
        store.apply(Commit(key=KEY, lease=lease, consume=[e.entry_id for e in chunk]))
        seen += [entry.payload for entry in chunk]
    return seen


class WriteUnits:
    """DynamoDB write units of each keep, as DynamoDB Local reports them."""

    def __init__(self, store: AwsStore) -> None:
        self.units: list[float] = []
        events = store.dynamodb.meta.events
        for operation in ("UpdateItem", "TransactWriteItems"):
            events.register(f"provide-client-params.dynamodb.{operation}", self._ask)
            events.register(f"after-call.dynamodb.{operation}", self._note)

    def _ask(self, params: dict[str, Any], **_: Any) -> None:
        params["ReturnConsumedCapacity"] = "TOTAL"

    def _note(self, parsed: dict[str, Any], **_: Any) -> None:
        found = parsed.get("ConsumedCapacity")
        found = found if isinstance(found, list) else [found] if found else []
        self.units.append(sum(c.get("CapacityUnits", 0) for c in found))


@pytest.fixture
def store(backend: Backend) -> Iterator[Store]:
    yield backend.open(lease_seconds=600, backlog_limit=2500)


def test_a_megabyte_of_replies_behind_a_run_is_kept_in_full(store: Store) -> None:
    lease = hold(store)
    sent = [payload(i, 12_500) for i in range(84)]  # 12,500 characters each: ~1 MB
    for i, text in enumerate(sent):
        kept = store.keep(KEY, f"Ev{i}", text, create=False, participant="U2")
        assert kept.kept and not kept.refused, i
    assert drain(store, lease)[1:] == sent  # the first is the message that took the thread
    assert store.read_inbox(KEY) == []
    if isinstance(store, AwsStore):
        item = store.dynamodb.get_item(TableName=store.table, Key=meta_key(KEY))["Item"]
        assert len(str(item)) < 10_000  # the record did not grow with the backlog


def test_two_thousand_short_replies_cost_the_same_each(store: Store) -> None:
    lease = hold(store)
    units = WriteUnits(store) if isinstance(store, AwsStore) else None
    sent = [payload(i) for i in range(2000)]
    for i, text in enumerate(sent):
        assert store.keep(KEY, f"Ev{i}", text, create=False, participant="U2").kept, i
    assert not store.keep(KEY, "Ev7", payload(7), create=False).kept  # a retried delivery
    page = store.read_inbox(KEY, lease.generation, CONSUME_LIMIT + 1)
    assert [e.payload for e in page] == [payload(-1), *sent[:CONSUME_LIMIT]]
    assert drain(store, lease)[1:] == sent
    if units is not None:
        keeps = units.units[:2000]
        early, late = keeps[10:110], keeps[-100:]
        print(f"write units per keep: first {keeps[:10]}, then {max(early)} .. {max(late)}")
        assert max(late) <= max(early)  # flat: the 2,000th costs what the 20th did
        assert max(keeps) <= 12


def test_past_the_cap_a_keep_is_refused_not_failed(backend: Backend) -> None:
    store = backend.open(lease_seconds=600, backlog_limit=30)
    lease = hold(store)
    for i in range(29):
        assert store.keep(KEY, f"Ev{i}", payload(i), create=False).kept
    refused = store.keep(KEY, "Ev-over", payload(99), create=False)
    assert (refused.kept, refused.refused) == (False, True)
    page = store.read_inbox(KEY, lease.generation, 10)
    store.apply(Commit(key=KEY, lease=lease, consume=[e.entry_id for e in page]))
    assert store.keep(KEY, "Ev-next", payload(100), create=False).kept  # room again
    assert len(store.read_inbox(KEY)) == 30 - 10 + 1


def test_requests_about_the_run_are_kept_past_the_cap_and_not_counted(backend: Backend) -> None:
    """A stop or a decision (`keep(capped=False)`) is kept however full the backlog, and
    takes no message's place in it, while queued or when consumed (issue 49: at a full
    backlog Slack's stop and an Approve click were dropped without a word)."""
    store = backend.open(lease_seconds=600, backlog_limit=3)
    lease = hold(store)
    stop = '{"kind":"stop","user":"U1"}'
    for event_id in ("stop1", "click1"):
        kept = store.keep(KEY, event_id, stop, create=False, stop_by="U1", capped=False)
        assert (kept.kept, kept.refused) == (True, False)
    for i in range(2):  # the requests took no message's place
        assert store.keep(KEY, f"Ev{i}", payload(i), create=False).kept
    assert store.keep(KEY, "Ev-over", payload(9), create=False).refused  # full now
    late = store.keep(KEY, "stop2", stop, create=False, stop_by="U1", capped=False)
    assert (late.kept, late.refused) == (True, False)  # kept however full
    again = store.keep(KEY, "stop2", stop, create=False, stop_by="U1", capped=False)
    assert (again.kept, again.refused) == (False, False)  # a duplicate all the same
    entries = store.read_inbox(KEY, lease.generation)
    assert [e.event_id for e in entries] == ["first", "stop1", "click1", "Ev0", "Ev1", "stop2"]
    requests = [e.entry_id for e in entries if e.event_id.startswith(("stop", "click"))]
    store.apply(Commit(key=KEY, lease=lease, consume=requests, clear_stop=True))
    assert store.keep(KEY, "Ev-over2", payload(10), create=False).refused  # as full as before
    [first] = [e.entry_id for e in entries if e.event_id == "first"]
    store.apply(Commit(key=KEY, lease=lease, consume=[first]))
    assert store.keep(KEY, "Ev3", payload(3), create=False).kept  # one message's room
    assert store.keep(KEY, "Ev4", payload(4), create=False).refused


def test_refusals_not_yet_told_outlive_an_expired_state(backend: Backend) -> None:
    """Messages refused at the cap, whose notice died with its process, are still on the
    record that brings the thread back after its state expired, to be told (chaos seed
    160014: 12 refused messages were neither answered nor named)."""
    store = backend.open(lease_seconds=600, state_ttl=timedelta(seconds=2), backlog_limit=3)
    clock = clocked(store)  # the keeps all happen within the TTL, however slow the machine
    hold(store)
    for i in range(REFUSALS_NAMED + 4):
        store.keep(KEY, f"Ev{i}", payload(i), create=False, participant="U2")
    before = store.get(KEY)
    assert before is not None and (len(before.refused), before.refused_more) == (
        REFUSALS_NAMED,
        2,
    )
    clock.tick(timedelta(seconds=3.5))  # the state expires
    store.keep(KEY, "later", payload(99), participant="U2")
    record = store.get(KEY)
    assert record is not None and record.expired_from is not None
    assert record.refused == before.refused and record.refused_more == 2
    assert record.expired_from.dropped_more == 0  # the two kept behind the first are quoted


def test_a_refusal_is_recorded_until_the_thread_is_told(backend: Backend) -> None:
    """A refusal is on the record from the write that refused it (a notice lost with its
    process is told by whoever serves the thread next): the first ones named, with their
    author and text, the rest counted; it moves `inbox_seq`, so that the holder's release
    sees it; telling removes exactly what was told."""
    store = backend.open(lease_seconds=600, backlog_limit=5)
    lease = hold(store)
    for i in range(4):
        assert store.keep(KEY, f"Ev{i}", payload(i), create=False).kept
    before = store.get(KEY)
    assert before is not None and not before.refusals_untold
    verdicts = [
        store.keep(
            KEY,
            f"Ev-over{i}",
            payload(i),
            create=False,
            participant="U7",
            refusal_text=f"refused {i} " + "y" * 400,
        )
        for i in range(REFUSALS_NAMED + 3)
    ]
    assert all(v.refused and not v.kept for v in verdicts)
    assert [v.named for v in verdicts] == [True] * REFUSALS_NAMED + [False] * 3
    record = store.get(KEY)
    assert record is not None
    assert [r.event_id for r in record.refused] == [f"Ev-over{i}" for i in range(REFUSALS_NAMED)]
    assert record.refused[0].user == "U7"
    assert record.refused[0].text.startswith("refused 0 ")
    assert len(record.refused[0].text) == REFUSAL_TEXT
    assert record.refused_more == 3
    assert record.inbox_seq == before.inbox_seq + REFUSALS_NAMED + 3
    # A duplicate of a refused message is not recorded again.
    again = store.keep(KEY, "Ev-over0", payload(0), create=False, participant="U7")
    assert not again.refused
    store.refusals_told(KEY, ["Ev-over0", "Ev-over1"], counted=2)
    record = store.get(KEY)
    assert record is not None
    assert [r.event_id for r in record.refused][:1] == ["Ev-over2"]
    assert (len(record.refused), record.refused_more) == (REFUSALS_NAMED - 2, 1)
    assert store.read_inbox(KEY, lease.generation, 10)  # the backlog itself is untouched
    store.refusals_told(KEY, [r.event_id for r in record.refused], counted=5)  # more than left
    record = store.get(KEY)
    assert record is not None and (record.refused, record.refused_more) == ([], 1)
    store.refusals_told(KEY, [], counted=1)
    record = store.get(KEY)
    assert record is not None and not record.refusals_untold
    store.refusals_told(KEY, ["Ev-over0"], counted=1)  # told twice: harmless


def test_a_message_refused_at_the_cap_is_not_kept_when_delivered_again(
    backend: Backend,
) -> None:
    """A mention in a thread comes as two events (`app_mention` and `message`), one message:
    once the thread is told the first was not taken, the second is a duplicate, even when
    the backlog has room by then; and a duplicate of a message kept is never "refused"."""
    store = backend.open(lease_seconds=600, backlog_limit=12)
    lease = hold(store)
    for i in range(11):
        assert store.keep(KEY, f"Ev{i}", payload(i), create=False).kept
    refused = store.keep(KEY, "Ev-over", payload(99), create=False, token="t-over")
    assert (refused.kept, refused.refused) == (False, True)
    for i in (0, 3, 10):  # kept before, some in the record and some in rows on aws
        again = store.keep(KEY, f"Ev{i}", payload(i), create=False)
        assert (again.kept, again.refused) == (False, False), i
    # Our own refused keep, retried (its answer lost): refused again, not a duplicate.
    retried = store.keep(KEY, "Ev-over", payload(99), create=False, token="t-over")
    assert (retried.kept, retried.refused) == (False, True)
    page = store.read_inbox(KEY, lease.generation, 10)
    store.apply(Commit(key=KEY, lease=lease, consume=[e.entry_id for e in page]))
    later = store.keep(KEY, "Ev-over", payload(99), create=False)  # the other event
    assert (later.kept, later.refused) == (False, False)
    assert payload(99) not in [e.payload for e in store.read_inbox(KEY)]


def test_a_retried_keep_is_recognised_in_a_row_too(store: Store) -> None:
    hold(store)
    for i in range(10):  # past what the record holds itself
        assert store.keep(KEY, f"Ev{i}", payload(i), create=False, token=f"t{i}").kept
    assert not store.keep(KEY, "Ev8", payload(8), create=False, token="other").kept
    # Our own attempt whose answer was lost (same token): kept, and kept once.
    assert store.keep(KEY, "Ev8", payload(8), create=False, token="t8").kept
    assert [e.event_id for e in store.read_inbox(KEY)].count("Ev8") == 1


def test_an_expired_states_messages_are_named_from_its_rows_too(backend: Backend) -> None:
    """Messages a busy thread kept in rows (on aws) are among those its expired state
    names when the thread comes back, as those kept in the record are (chaos seed 150050
    aws: a message behind a burst was neither answered nor named after the expiry)."""
    store = backend.open(lease_seconds=600, state_ttl=timedelta(seconds=2), backlog_limit=2500)
    clock = clocked(store)  # the keeps all happen within the TTL, however slow the machine
    hold(store)
    sent = [payload(i, 12_500) for i in range(40)]  # past what the record holds on aws
    for i, text in enumerate(sent):
        clock.tick(timedelta(milliseconds=1))  # one after the other, as they arrive
        assert store.keep(KEY, f"Ev{i}", text, create=False, participant="U2").kept
    clock.tick(timedelta(seconds=3.5))  # the state expires
    store.keep(KEY, "later", payload(99), participant="U2")
    record = store.get(KEY)
    assert record is not None and record.expired_from is not None
    assert record.expired_from.dropped == [payload(-1), *sent][:DROPPED_KEPT]
    assert record.expired_from.dropped_more == 1 + len(sent) - DROPPED_KEPT


def test_an_expired_state_counts_the_messages_it_does_not_quote(backend: Backend) -> None:
    """An expired state quotes its first few queued messages and counts the rest, so that
    the thread can be told how many went unanswered (chaos seed 160014: 37 were queued,
    the notice said 11)."""
    store = backend.open(lease_seconds=600, state_ttl=timedelta(seconds=2))
    clock = clocked(store)  # the keeps all happen within the TTL, however slow the machine
    hold(store)
    for i in range(24):  # short: all in the record on aws
        assert store.keep(KEY, f"Ev{i}", payload(i), create=False, participant="U2").kept
    clock.tick(timedelta(seconds=3.5))  # the state expires
    store.keep(KEY, "later", payload(99), participant="U2")
    record = store.get(KEY)
    assert record is not None and record.expired_from is not None
    assert len(record.expired_from.dropped) == DROPPED_KEPT
    assert record.expired_from.dropped_more == 25 - DROPPED_KEPT
    assert [e.event_id for e in store.read_inbox(KEY, record.generation)] == ["later"]
