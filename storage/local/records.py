"""The conversation record on sqlite: reading it, and taking and renewing its lease (a
record whose state expired is brought back by the take that finds it, see
`Database.fresh`); and the replicas' heartbeats (`storage.replicas`), which tell whether a
lease's holder still lives: one row per replica. Keeping messages in it is `keeps`'."""

from __future__ import annotations

from datetime import UTC, datetime

from storage.errors import LeaseBusy, LeaseLost, NotFound
from storage.local.database import Database, fenced, read_inbox, read_record, status_change
from storage.models import Conversation, ConversationKey, Lease
from storage.replicas import BEAT_TTL, check_replica
from storage.writes import LeaseRequest


class Records:
    def __init__(self, database: Database) -> None:
        self.d = database

    def get(self, key: ConversationKey) -> Conversation | None:
        record = read_record(self.d.connection(), key)
        return None if record is None or self.d.expired(record, self.d.clock()) else record

    def expired_record(self, key: ConversationKey) -> Conversation | None:
        record = read_record(self.d.connection(), key)
        now = self.d.clock()
        if record is None or not self.d.expired(record, now):
            return None
        return record if now <= self.d.policies.tombstone_until(record) else None

    def stop_requested(self, key: ConversationKey) -> str | None:
        record = self.get(key)
        return record.stop_by if record else None

    def acquire(self, request: LeaseRequest) -> tuple[Lease, Conversation]:
        now = self.d.clock()
        with self.d.write() as db:
            record = self.d.live(db, request.key, now)
            if record is None:
                if not request.create:
                    raise NotFound(str(request.key))
                record = self.d.fresh(db, request.key, now, revive=True)
            held = record.lease_owner is not None and record.lease_expires_at is not None
            busy = held and record.lease_expires_at >= self.d.policies.takeover_cutoff(now)  # type: ignore[operator]
            if request.takeover_from is not None and record.lease_owner == request.takeover_from:
                busy = False  # its holder is known to be dead
            if busy and not request.force:
                raise LeaseBusy(str(request.key), record.lease_owner, record.lease_expires_at)
            record = record.model_copy(
                update={
                    "fence": record.fence + 1,
                    "lease_owner": request.owner,
                    "lease_expires_at": now + self.d.policies.lease_duration,  # == Lease.expires_at
                    "stop_by": None,
                    "updated_at": now,
                    **(status_change(request.status, None, now) if request.status else {}),
                }
            )
            self.d.save(db, record)
            inbox = read_inbox(db, request.key)
        return Lease.held_in(record), record.model_copy(update={"inbox": inbox})

    def renew(self, lease: Lease, *, working: bool) -> Lease:
        now = self.d.clock()
        with self.d.write() as db:
            record = fenced(db, lease)
            expires = now + self.d.policies.lease_duration
            update: dict[str, object] = {"lease_expires_at": expires}
            if working:  # a run in progress is activity: its state lives on (not if gone)
                if self.d.expired(record, now):
                    raise LeaseLost(str(lease.key), lease.fence)
                update["expires_at"] = self.d.policies.expiry(now)
            self.d.save(db, record.model_copy(update=update))
        return lease.model_copy(update={"expires_at": expires, "stop_by": record.stop_by})


class Replicas:
    def __init__(self, database: Database) -> None:
        self.d = database

    def beat(self, replica: str) -> None:
        now = self.d.clock().timestamp()
        with self.d.write() as db:
            db.execute(
                "INSERT OR REPLACE INTO replicas (replica, beat_at) VALUES (?, ?)",
                (check_replica(replica), now),
            )
            # sqlite has no TTL: replicas gone for good are forgotten as others beat.
            db.execute("DELETE FROM replicas WHERE beat_at < ?", (now - BEAT_TTL.total_seconds(),))

    def beats(self) -> dict[str, datetime]:
        rows = self.d.connection().execute("SELECT replica, beat_at FROM replicas").fetchall()
        return {str(name): datetime.fromtimestamp(at, tz=UTC) for name, at in rows}
