"""Replicas' heartbeats, on both backends: a lease held by a replica that stopped beating is
taken over well before it expires, with the fence bumped, so the silent holder's late
writes are refused; a lease of a replica that beats, or of one that never beat, is not."""

from __future__ import annotations

from datetime import timedelta

import pytest

from storage import KEEP, Commit, LeaseBusy, LeaseLost, Store
from storage.replicas import replica_of, silent
from tests.storage.conftest import KEY

SILENCE = timedelta(seconds=4)


def test_a_beat_replaces_the_replicas_last_one(store: Store) -> None:
    start = store.clock()
    store.beat("host-a|boot|10|99")
    store.beat("host-b|boot|11|98")
    later = start + timedelta(seconds=3)
    store.clock = lambda: later
    store.beat("host-a|boot|10|99")
    beats = store.beats()
    assert set(beats) == {"host-a|boot|10|99", "host-b|boot|11|98"}
    assert beats["host-a|boot|10|99"] > beats["host-b|boot|11|98"]


def test_a_silent_replicas_lease_is_taken_over_fenced(store: Store) -> None:
    dead = "host-a|boot|10|99"
    owner = f"{dead}|abcd1234"
    assert replica_of(owner) == dead
    store.beat(dead)
    lease, _ = store.acquire(KEY, owner)
    # Five seconds on: the lease (lease_seconds=5 plus skew) still holds, the beat is stale.
    later = store.clock() + timedelta(seconds=4.5)
    store.clock = lambda: later
    store.beat("host-b|boot|11|98")
    assert lease.expires_at > later  # not lapsed: only the heartbeat says it is dead
    with pytest.raises(LeaseBusy):
        store.acquire(KEY, "host-b|boot|11|98|00000001")
    beats = store.beats()
    assert silent(owner, beats, later - SILENCE)
    assert not silent("host-b|boot|11|98|00000002", beats, later - SILENCE)
    assert not silent("host-c|never|beat|1|00000003", beats, later - SILENCE)
    taken, record = store.acquire(KEY, "host-b|boot|11|98|00000001", takeover_from=owner)
    assert taken.fence == lease.fence + 1
    assert record.lease_owner == "host-b|boot|11|98|00000001"
    # The silent holder comes back (a long pause, a partition): everything it writes is refused.
    with pytest.raises(LeaseLost):
        store.renew(lease)
    with pytest.raises(LeaseLost):
        store.apply(Commit(key=KEY, lease=lease, checkpoint=KEEP))
    with pytest.raises(LeaseLost):
        store.release(lease)
    store.release(taken)
