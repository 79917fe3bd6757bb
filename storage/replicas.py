"""Replicas' heartbeats: each serving process writes one small record every second or so
(`beat`), and another replica that finds a lease held by a process whose heartbeat is stale
takes the thread over at once (`Store.acquire(takeover_from=...)`, which bumps the fence,
so the silent holder's late writes are refused) instead of waiting for the lease to expire.

One record per replica, not per conversation: the write cost of a running conversation is
unchanged (its lease renewals); a replica adds one write per beat whatever it serves. A
lease names its holder's replica (`replica_of`); a replica that never beat (an older
version) is left to its leases' expiry. Records of replicas gone for good expire
(`BEAT_TTL`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Protocol

from storage.installations import check_id

BEAT_TTL = timedelta(hours=1)  # a replica's record outlives its last beat this long
SEPARATOR = "|"  # an owner is `replica|suffix` (see `bot.runtime.lease_owner.new_owner`)


class ReplicasPart(Protocol):
    """A backend's heartbeats: what `ReplicaBeats` hands each call to."""

    def beat(self, replica: str) -> None: ...

    def beats(self) -> dict[str, datetime]: ...


class ReplicaBeats:
    replicas: ReplicasPart
    translating: AbstractContextManager[None]

    def beat(self, replica: str) -> None:
        """Record that `replica` is alive now (replacing its earlier beat): one write."""
        with self.translating:
            self.replicas.beat(replica)

    def beats(self) -> dict[str, datetime]:
        """Each replica's latest beat (replicas that beat within `BEAT_TTL`): one read."""
        with self.translating:
            return self.replicas.beats()


def replica_of(owner: str) -> str:
    """The replica a lease owner names: the owner without its per-acquisition suffix."""
    return owner.rsplit(SEPARATOR, 1)[0] if SEPARATOR in owner else owner


def check_replica(replica: str) -> str:
    return check_id(replica, "replica")


def silent(owner: str, beats: dict[str, datetime], since: datetime) -> bool:
    """The owner's replica beat, and not since `since`: it is taken for dead. False for a
    replica that never beat (its lease's expiry decides)."""
    last = beats.get(replica_of(owner))
    return last is not None and last < since
