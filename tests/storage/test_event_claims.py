"""A kept message's event id is claimed in the same write, so a retried delivery is refused
for at least `claim_ttl`. On aws the claims are digests in three per-period string sets, so a
busy thread's record holds a few periods' worth and no more; claims written before the sets
(by the previous version) still count until they expire."""

from __future__ import annotations

from datetime import datetime, timedelta

from storage import Commit, Store
from storage.aws import AwsStore
from storage.aws.layout import CLAIM_SETS, LEGACY_CLAIM, epoch_seconds, meta_key
from storage.models import utcnow
from tests.conftest import Backend
from tests.storage.conftest import KEY

TTL = timedelta(minutes=10)


def at(store: Store, when: datetime) -> Store:
    store.clock = lambda: when
    return store


def period_start(now: datetime) -> datetime:
    """The start of the claim period `now` falls in (periods are whole multiples of TTL)."""
    seconds = TTL.total_seconds()
    return datetime.fromtimestamp(now.timestamp() // seconds * seconds, tz=now.tzinfo)


def keep(store: Store, event_id: str) -> bool:
    return store.keep(KEY, event_id, '{"user":"U","text":"hi"}').kept


def test_a_retry_is_refused_for_at_least_the_claim_ttl(backend: Backend) -> None:
    store = backend.open(claim_ttl=TTL)
    # Kept at the very end of a period: the worst case for per-period claims.
    start = period_start(utcnow()) + TTL - timedelta(seconds=1)
    assert keep(at(store, start), "Ev1")
    for later in (timedelta(0), timedelta(seconds=2), TTL - timedelta(seconds=1)):
        assert not keep(at(store, start + later), "Ev1"), later
    assert keep(at(store, start + timedelta(seconds=3)), "Ev2")  # another event is not


def test_the_record_holds_the_claims_of_three_periods_at_most(backend: Backend) -> None:
    """A thread whose messages are served as they come: every one is kept in the record,
    with its claim."""
    store = backend.open(claim_ttl=TTL)
    if not isinstance(store, AwsStore):
        return  # the local backend keeps claims in a table of their own
    start = period_start(utcnow())
    for period in range(5):
        for i in range(20):
            assert keep(at(store, start + period * TTL + timedelta(seconds=i)), f"Ev{period}.{i}")
            [entry] = store.read_inbox(KEY)
            store.apply(Commit(key=KEY, lease=None, consume=[entry.entry_id]))
    item = store.dynamodb.get_item(TableName=store.table, Key=meta_key(KEY))["Item"]
    assert not [name for name in item if name.startswith(LEGACY_CLAIM)]
    held = sum(len(item.get(name, {}).get("SS", [])) for name in CLAIM_SETS)
    assert 40 <= held <= 60, held  # this period's and the last (the one before is emptied)
    # Every claim of the last two periods is still honoured.
    assert not keep(at(store, start + 4 * TTL + timedelta(seconds=30)), "Ev3.7")


def test_a_claim_written_before_the_sets_is_honoured_until_it_expires(backend: Backend) -> None:
    store = backend.open(claim_ttl=TTL)
    if not isinstance(store, AwsStore):
        return
    now = utcnow()
    assert keep(at(store, now), "Ev-new")
    store.dynamodb.update_item(  # what the previous version wrote for a kept event
        TableName=store.table,
        Key=meta_key(KEY),
        UpdateExpression="SET #claim = :until",
        ExpressionAttributeNames={"#claim": LEGACY_CLAIM + "Ev-old"},
        ExpressionAttributeValues={":until": {"N": str(epoch_seconds(now + TTL))}},
    )
    assert not keep(at(store, now + timedelta(minutes=1)), "Ev-old")
    assert keep(at(store, now + TTL + timedelta(seconds=2)), "Ev-old")


def test_a_claim_outlives_the_state_it_came_with(backend: Backend) -> None:
    """A delivery that lands after the thread's state expired (it was stuck; the state TTL is
    shorter than the claim's) is a duplicate still: the thread that comes back does not keep
    the message again. Claims in rows (a busy thread's) as well as in the record."""
    store = backend.open(claim_ttl=TTL, state_ttl="30s")
    start = period_start(utcnow()) + timedelta(seconds=5)
    at(store, start)
    for i in range(8):  # past what the record holds: the later claims live in rows on aws
        assert keep(store, f"Ev{i}")
    at(store, start + timedelta(minutes=2))  # the state expired; the claims have not
    assert store.get(KEY) is None and store.expired_record(KEY) is not None
    for i in (0, 7):
        assert not keep(store, f"Ev{i}"), i
    assert keep(store, "Ev-new")  # and the thread goes on, with that message alone
    record = store.get(KEY)
    assert record is not None
    assert [e.event_id for e in store.read_inbox(KEY, record.generation)] == ["Ev-new"]
