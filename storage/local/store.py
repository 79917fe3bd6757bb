"""sqlite3 backend (the default): leases, the atomic write, session items, the inbox, blobs
and housekeeping here; the database and the record's rows in `database`, ledgers in
`ledger`, operational queries in `queries`, installations in `installations`, verdicts in
`feedback`, replicas' heartbeats in `replicas`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from storage.content import CONTENT_PREFIX
from storage.errors import (
    CheckpointConflict,
    InboxChanged,
    LeaseBusy,
    NotFound,
    SessionConflict,
)
from storage.local.database import (
    ROW_TABLES,
    backlog,
    fenced,
    read_inbox,
    read_record,
    read_tool,
    status_change,
    translated,
)
from storage.local.feedback import Feedback
from storage.local.installations import Installations
from storage.local.ledger import Ledgers
from storage.local.people import People
from storage.local.queries import ListingQueries
from storage.local.replicas import Replicas
from storage.models import (
    REFUSAL_TEXT,
    Conversation,
    ConversationKey,
    DeliveryMark,
    InboxEntry,
    Lease,
    Refusal,
    Status,
    inbox_stamp,
    with_refusal,
    with_refusals_told,
)
from storage.writes import KEEP, Commit, Committed, KeepResult, SessionPage

CONTENT_GRACE = timedelta(days=1)  # content outlives the history rows that refer to it


class LocalStore(Ledgers, ListingQueries, Installations, People, Feedback, Replicas):
    # -- leases -------------------------------------------------------------------------

    @translated
    def acquire(
        self,
        key: ConversationKey,
        owner: str,
        *,
        status: Status | None = None,
        force: bool = False,
        create: bool = True,
        takeover_from: str | None = None,
    ) -> tuple[Lease, Conversation]:
        now = self.clock()
        with self._write() as db:
            record = self._live(db, key, now)
            if record is None:
                if not create:
                    raise NotFound(str(key))
                record = self._fresh(db, key, now, revive=True)
            held = record.lease_owner is not None and record.lease_expires_at is not None
            busy = held and record.lease_expires_at >= self.takeover_cutoff(now)  # type: ignore[operator]
            if takeover_from is not None and record.lease_owner == takeover_from:
                busy = False  # its holder is known to be dead
            if busy and not force:
                raise LeaseBusy(str(key), record.lease_owner, record.lease_expires_at)
            record = record.model_copy(
                update={
                    "fence": record.fence + 1,
                    "lease_owner": owner,
                    "lease_expires_at": now + self.lease_duration,  # == Lease.expires_at
                    "stop_by": None,
                    "updated_at": now,
                    **(status_change(status, None, now) if status else {}),
                }
            )
            self._save(db, record)
            inbox = read_inbox(db, key)
        expires = now + self.lease_duration
        lease = Lease(
            key=key,
            owner=owner,
            fence=record.fence,
            expires_at=expires,
            generation=record.generation,
        )
        return lease, record.model_copy(update={"inbox": inbox})

    @translated
    def renew(self, lease: Lease) -> Lease:
        now = self.clock()
        with self._write() as db:
            record = fenced(db, lease)
            expires = now + self.lease_duration
            self._save(db, record.model_copy(update={"lease_expires_at": expires}))
        return lease.model_copy(update={"expires_at": expires, "stop_by": record.stop_by})

    # -- the atomic write ---------------------------------------------------------------

    @translated
    def apply(self, commit: Commit) -> Committed:
        now = self.clock()
        with self._write() as db:
            if commit.lease is not None:
                record = fenced(db, commit.lease)
            else:
                record = self._live(db, commit.key, now) or self._fresh(
                    db, commit.key, now, revive=False
                )
            if (
                commit.expected_version is not None
                and record.checkpoint_version != commit.expected_version
            ):
                raise CheckpointConflict(
                    str(commit.key), commit.expected_version, record.checkpoint_version
                )
            if commit.inbox_seen is not None and commit.inbox_seen != record.inbox_seq:
                raise InboxChanged(f"{commit.key}: inbox at {record.inbox_seq}")
            for entry_id in commit.consume:
                db.execute(
                    "DELETE FROM inbox WHERE key = ? AND entry_id = ?", (str(commit.key), entry_id)
                )
            if commit.base_seq is not None and commit.base_seq != record.next_seq:
                raise SessionConflict(
                    f"{commit.key}: items staged at seq {commit.base_seq}, now {record.next_seq}"
                )
            next_seq = record.next_seq
            armed = []
            for call in commit.arm:  # calls recorded as started with this checkpoint
                if read_tool(db, commit.key, call.call_id) is None:  # else it says more
                    self._save_tool(db, call)
                    armed.append(call.call_id)
            for item in commit.items:
                db.execute(
                    "INSERT INTO items (key, seq, data) VALUES (?, ?, ?)",
                    (str(commit.key), next_seq, item),
                )
                next_seq += 1
            update: dict[str, Any] = {"updated_at": now, "next_seq": next_seq}
            if commit.checkpoint is not KEEP:
                update["checkpoint"] = (
                    commit.checkpoint.model_copy(update={"session_seq": next_seq})  # type: ignore[union-attr]
                    if commit.checkpoint is not None
                    else None
                )
            if commit.status is not None:
                update |= status_change(commit.status, commit.run_by, now)
            if commit.run_by is not None:
                update["run_by"] = commit.run_by
            if commit.clear_expiry:
                update["expired_from"] = None
            if commit.clear_stop:
                update["stop_by"] = None
            if commit.release:
                update |= {"lease_owner": None, "lease_expires_at": None, "stop_by": None}
            if commit.touch:
                update |= {"last_activity_at": now, "expires_at": now + self.state_ttl}
            record = record.model_copy(update=update)
            delivery = commit.delivery
            if delivery is None and commit.delivered:
                delivery = DeliveryMark(version=record.checkpoint_version)
            if delivery is not None:
                record = record.model_copy(
                    update={
                        "delivered_version": delivery.version,
                        "delivered_count": delivery.count,
                        "delivery_attempts": delivery.attempts,
                        "delivery_retry_at": delivery.retry_at,
                        "delivery_error": delivery.error,
                    }
                )
            self._save(db, record)
        wrote_pointer = commit.checkpoint is not KEEP and commit.checkpoint is not None
        session_known = commit.base_seq is not None or bool(commit.items) or wrote_pointer
        return Committed(
            key=commit.key,
            next_seq=record.next_seq if session_known else None,
            checkpoint=record.checkpoint if wrote_pointer else None,
            status=commit.status,
            armed=tuple(armed),
        )

    # -- session ------------------------------------------------------------------------

    @translated
    def read_items(self, key: ConversationKey, limit: int | None = None) -> SessionPage:
        db = self._connection()
        db.execute("BEGIN")  # one snapshot for the record and its items
        try:
            record = read_record(db, key)
            if record is None:
                return SessionPage(items=[], next_seq=0)
            query = "SELECT data FROM items WHERE key = ? AND seq >= ? ORDER BY seq DESC"
            params: tuple[Any, ...] = (str(key), record.session_floor)
            if limit is not None:
                query += " LIMIT ?"
                params += (max(limit, 0),)
            rows = db.execute(query, params).fetchall()
        finally:
            db.execute("COMMIT")
        return SessionPage(items=[row[0] for row in reversed(rows)], next_seq=record.next_seq)

    @translated
    def pop_item(self, key: ConversationKey, lease: Lease | None = None) -> str | None:
        with self._write() as db:
            record = fenced(db, lease) if lease else read_record(db, key)
            if record is None:
                return None
            row = db.execute(
                "SELECT seq, data FROM items WHERE key = ? AND seq >= ? ORDER BY seq DESC LIMIT 1",
                (str(key), record.session_floor),
            ).fetchone()
            if row is None:
                return None
            db.execute("DELETE FROM items WHERE key = ? AND seq = ?", (str(key), row[0]))
            return str(row[1])

    @translated
    def clear_items(self, key: ConversationKey, lease: Lease | None = None) -> None:
        with self._write() as db:
            record = fenced(db, lease) if lease else read_record(db, key)
            if record is None:
                return
            self._save(db, record.model_copy(update={"session_floor": record.next_seq}))
            db.execute("DELETE FROM items WHERE key = ?", (str(key),))

    # -- inbox --------------------------------------------------------------------------

    @translated
    def keep(
        self,
        key: ConversationKey,
        event_id: str,
        payload: str,
        *,
        create: bool = True,
        participant: str | None = None,
        owner: str | None = None,
        token: str | None = None,
        stop_by: str | None = None,
        refusal_text: str = "",
    ) -> KeepResult:
        now = self.clock()
        with self._write() as db:
            record = self._live(db, key, now)
            if record is None:
                tombstone = read_record(db, key)
                lasts = tombstone is not None and now <= self.tombstone_until(tombstone)
                if not (create or lasts):
                    raise NotFound(str(key))
                record = self._fresh(db, key, now, revive=True)
            claim = f"{key}|{event_id}"
            refusal = f"{claim}|refused|{token}"  # this keep was refused (if it was)
            if not self._claim(db, claim, now.timestamp(), self.claim_ttl):
                if token and self._claimed(db, refusal, now.timestamp()):
                    return KeepResult(kept=False, refused=True)  # our own refusal, retried
                # Our own earlier attempt (same token) is a keep; anything else a duplicate.
                mine = bool(token) and any(
                    e.event_id == event_id and e.token == token for e in read_inbox(db, key)
                )
                return KeepResult(kept=mine)
            if backlog(db, key) >= self.backlog_limit:
                # Claimed all the same: another delivery of it is a duplicate, not kept
                # after the thread was told this one was not taken.
                if token:
                    self._claim(db, refusal, now.timestamp(), self.claim_ttl)
                told = Refusal(
                    event_id=event_id,
                    user=participant or "",
                    text=refusal_text[:REFUSAL_TEXT],
                    at=now,
                )
                record = with_refusal(record, told)
                self._save(db, record)
                return KeepResult(kept=False, refused=True, named=told in record.refused)
            entry = InboxEntry(
                entry_id=f"{inbox_stamp(now)}#{event_id}",
                event_id=event_id,
                payload=payload,
                received_at=now,
                token=token or "",
            )
            db.execute(
                "INSERT INTO inbox (key, entry_id, entry) VALUES (?, ?, ?)",
                (str(key), entry.entry_id, entry.model_dump_json()),
            )
            participants = record.participants | ({participant} if participant else set())
            update: dict[str, Any] = {
                "inbox_seq": record.inbox_seq + 1,
                **status_change(Status.RUNNING, None, now),
                "participants": participants,
                "updated_at": now,
                "last_activity_at": now,
                "expires_at": now + self.state_ttl,
            }
            held = record.lease_owner is not None and record.lease_expires_at is not None
            free = not held or record.lease_expires_at < self.takeover_cutoff(now)  # type: ignore[operator]
            take = owner is not None and free
            if take:
                update |= {
                    "fence": record.fence + 1,
                    "lease_owner": owner,
                    "lease_expires_at": now + self.lease_duration,
                    "stop_by": None,
                    "run_by": participant or record.run_by,
                }
            if stop_by:
                update["stop_by"] = stop_by
            record = record.model_copy(update=update)
            self._save(db, record)
            inbox = read_inbox(db, key)
        if not take:
            return KeepResult(kept=True)
        lease = Lease(
            key=key,
            owner=record.lease_owner or "",
            fence=record.fence,
            expires_at=now + self.lease_duration,
            generation=record.generation,
        )
        return KeepResult(kept=True, lease=lease, record=record.model_copy(update={"inbox": inbox}))

    @translated
    def read_inbox(
        self, key: ConversationKey, generation: int | None = None, limit: int | None = None
    ) -> list[InboxEntry]:
        return read_inbox(self._connection(), key, limit)

    @translated
    def refusals_told(
        self, key: ConversationKey, event_ids: Sequence[str], counted: int = 0
    ) -> None:
        with self._write() as db:
            record = read_record(db, key)
            if record is not None and record.refusals_untold:
                self._save(db, with_refusals_told(record, event_ids, counted))

    # -- blobs and housekeeping ---------------------------------------------------------

    @translated
    def _put_blob(self, object_key: str, data: bytes) -> None:
        self.blobs.put_new(object_key, data)

    @translated
    def _get_blob(self, object_key: str) -> bytes:
        return self.blobs.get(object_key)

    @translated
    def _refresh_blob(self, object_key: str, data: bytes) -> None:
        self.blobs.refresh(object_key, data)

    @translated
    def _delete_blob(self, object_key: str) -> None:
        self.blobs.delete(object_key)

    def collect_garbage(self, *, orphan_age: timedelta = timedelta(hours=1)) -> int:
        """Delete expired rows (sqlite has no TTL; an expired record itself once its
        tombstone's time is over too), checkpoint blobs that no live record points to and
        that are older than `orphan_age`, and content blobs not written for a day
        longer than the state TTL (as the S3 lifecycle rule does). Returns how many blobs
        were removed."""
        now = self.clock()
        with self._write() as db:
            # A record whose state expired stays as its conversation's tombstone (its
            # queued messages with it, to be named) until `tombstone_ttl` later.
            expired = [
                row[0]
                for row in db.execute(
                    "SELECT key FROM conversations WHERE expires_at < ?", (now.timestamp(),)
                )
            ]
            gone = (now - self.tombstone_ttl).timestamp()
            for key in expired:
                db.execute(
                    "DELETE FROM conversations WHERE key = ? AND expires_at < ?", (key, gone)
                )
                for table in ROW_TABLES:
                    if table != "inbox":
                        db.execute(f"DELETE FROM {table} WHERE key = ?", (key,))
            db.execute("DELETE FROM inbox WHERE key NOT IN (SELECT key FROM conversations)")
            for table in ("events", "tool_calls", "one_time_states"):
                db.execute(f"DELETE FROM {table} WHERE expires_at < ?", (now.timestamp(),))
            live = {  # an expired state's checkpoint goes with it
                record.checkpoint.object_key
                for (text,) in db.execute(
                    "SELECT record FROM conversations WHERE expires_at >= ?", (now.timestamp(),)
                )
                if (record := Conversation.model_validate_json(text)).checkpoint
            }
        cutoff = (now - orphan_age).timestamp()
        removed = 0
        for object_key, mtime in self.blobs.keys("checkpoints"):
            if object_key not in live and mtime < cutoff:
                self.blobs.delete(object_key)
                removed += 1
        retained = (now - self.state_ttl - CONTENT_GRACE).timestamp()
        for object_key, mtime in self.blobs.keys(CONTENT_PREFIX.rstrip("/")):
            if mtime < retained:
                self.blobs.delete(object_key)
                removed += 1
        return removed
