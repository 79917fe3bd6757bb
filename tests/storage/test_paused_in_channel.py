"""`list_paused_in`, against both backends: one channel's threads awaiting approval or
interrupted, newest first, scoped to the workspace and channel, filtered by who took part,
never expired, and examining a bounded number of them (`PAUSED_PAGES` times the limit)."""

from __future__ import annotations

import uuid
from datetime import timedelta

from storage import ConversationKey, Status, Store
from storage.aws import AwsStore
from storage.aws.layout import PLACE_INDEX
from storage.listings import PAUSED_PAGES
from tests.storage.conftest import clocked, key


def left_in(store: Store, key: ConversationKey, status: Status, *users: str) -> None:
    """A thread whose `users` wrote in it, left in `status` by the run that served it."""
    lease = None
    for user in users or ("U1",):
        kept = store.keep(key, uuid.uuid4().hex, '{"text":"hi"}', participant=user, owner="w")
        lease = kept.lease or lease
    assert lease is not None
    store.release(lease, status=status)


def listed(
    store: Store,
    team: str = "T1",
    channel: str = "C1",
    *,
    enterprise: str | None = None,
    participant: str | None = None,
    limit: int = 50,
) -> list[str]:
    """The listed threads, by the last two digits of their thread_ts."""
    found = store.list_paused_in(
        team, channel, enterprise=enterprise, participant=participant, limit=limit
    )
    return [r.key.thread_ts[-2:] for r in found]


def test_lists_the_channels_paused_threads_newest_first(store: Store) -> None:
    clock = clocked(store)
    for n, status in enumerate(Status):  # one thread in each status, in this channel
        left_in(store, key(n), status)
        clock.tick()
    awaiting = list(Status).index(Status.AWAITING_APPROVAL)
    interrupted = list(Status).index(Status.INTERRUPTED)
    assert listed(store) == [f"{interrupted:02d}", f"{awaiting:02d}"]
    assert {r.status for r in store.list_paused_in("T1", "C1")} == {
        Status.INTERRUPTED,
        Status.AWAITING_APPROVAL,
    }
    assert listed(store, limit=1) == [f"{interrupted:02d}"]
    assert listed(store, limit=0) == []


def test_only_that_workspace_and_channel(store: Store) -> None:
    clock = clocked(store)
    left_in(store, key(1), Status.INTERRUPTED)
    places = [
        {"team": "T2"},  # another workspace, same channel id
        {"channel": "C2"},  # another channel
        {"channel": "C12"},  # a channel whose id starts like this one's
        {"enterprise": "E1"},  # the same team and channel ids, in an organisation
    ]
    for n, place in enumerate(places, start=2):
        clock.tick()
        left_in(store, key(n, **place), Status.INTERRUPTED)
    assert listed(store) == ["01"]
    assert listed(store, "T2") == ["02"]
    assert listed(store, channel="C2") == ["03"]
    assert listed(store, channel="C12") == ["04"]
    assert listed(store, enterprise="E1") == ["05"]
    assert listed(store, "T3") == []
    # Values no key can hold list nothing (rather than another workspace's threads).
    assert listed(store, "E1:T1") == []
    assert listed(store, channel="") == []
    assert listed(store, channel="C1:1700000000.000001") == []


def test_a_participant_sees_the_threads_they_wrote_in(store: Store) -> None:
    clock = clocked(store)
    left_in(store, key(1), Status.INTERRUPTED, "U1")
    clock.tick()
    left_in(store, key(2), Status.AWAITING_APPROVAL, "U2")
    clock.tick()
    left_in(store, key(3), Status.INTERRUPTED, "U2", "U1")
    assert listed(store, participant="U1") == ["03", "01"]
    assert listed(store, participant="U2") == ["03", "02"]
    assert listed(store, participant="U3") == []
    assert listed(store) == ["03", "02", "01"]
    [record] = store.list_paused_in("T1", "C1", participant="U2", limit=1)
    assert record.participants == {"U1", "U2"}


def in_index(store: Store) -> list[str]:
    """What the place index itself holds for T1/C1, newest first (aws; the local backend's
    partial index is what `listed` reads)."""
    if not isinstance(store, AwsStore):
        return listed(store)
    found = store.dynamodb.query(
        TableName=store.table,
        IndexName=PLACE_INDEX,
        KeyConditionExpression="place_key = :place",
        ExpressionAttributeValues={":place": {"S": "T1:C1"}},
        ScanIndexForward=False,
    )
    return [ConversationKey.parse(i["conv_key"]["S"]).thread_ts[-2:] for i in found["Items"]]


def test_status_changes_move_a_thread_in_and_out(store: Store) -> None:
    clock = clocked(store)
    left_in(store, key(1), Status.INTERRUPTED)
    clock.tick()
    left_in(store, key(2), Status.AWAITING_APPROVAL)
    assert listed(store) == ["02", "01"] == in_index(store)

    clock.tick()
    kept = store.keep(key(1), "Ev-more", '{"text":"go on"}', participant="U1", owner="w")
    assert kept.lease is not None
    assert listed(store) == ["02"] == in_index(store)  # running again: not paused
    clock.tick()
    store.release(kept.lease, status=Status.IDLE)
    assert listed(store) == ["02"] == in_index(store)

    lease, _ = store.acquire(key(1), "w2")
    store.set_status(lease, Status.AWAITING_APPROVAL)
    assert listed(store) == ["01", "02"]  # paused again, and more recently active
    store.release(lease, status=Status.INTERRUPTED)
    assert listed(store) == ["01", "02"] == in_index(store)

    clock.tick()
    left_in(store, key(2), Status.AWAITING_APPROVAL)  # a new message, answered, paused
    assert listed(store) == ["02", "01"]
    lease, _ = store.acquire(key(2), "admin", force=True)
    store.drop_checkpoint(lease, status=Status.DISCARDED, release=True)
    assert listed(store) == ["01"] == in_index(store)


def test_expired_threads_are_never_listed(store: Store) -> None:
    clock = clocked(store)
    left_in(store, key(1), Status.INTERRUPTED)
    clock.tick(store.state_ttl - timedelta(hours=1))
    left_in(store, key(2), Status.INTERRUPTED)
    assert listed(store) == ["02", "01"]
    clock.tick(timedelta(hours=2))  # past the first one's TTL
    assert listed(store) == ["02"]
    assert listed(store, participant="U1") == ["02"]


def test_examines_at_most_the_limit_times_the_pages(store: Store) -> None:
    """With a participant, a thread of theirs behind more newer paused threads of others
    (in that channel) than the bound examines is not listed: the price of bounded reads."""
    clock = clocked(store)
    left_in(store, key(0), Status.INTERRUPTED, "U1")
    others = 3 * PAUSED_PAGES
    for n in range(1, others + 1):
        clock.tick()
        left_in(store, key(n), Status.INTERRUPTED, "U2")
    assert listed(store, participant="U1", limit=2) == []  # 2 * PAUSED_PAGES examined
    assert listed(store, participant="U1", limit=4) == ["00"]  # all of them
    assert len(listed(store, limit=others + 1)) == others + 1
