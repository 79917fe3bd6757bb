"""sqlite3 backend. Every mutation runs in `BEGIN IMMEDIATE`, which takes the database's
write lock, so its read-check-write is atomic across threads and processes."""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from storage.base import INDEXED, KEEP, Commit, Committed, Kept, SessionPage, Store
from storage.content import CONTENT_PREFIX
from storage.errors import (
    CheckpointConflict,
    InboxChanged,
    LeaseBusy,
    LeaseLost,
    NotFound,
    SessionConflict,
    StorageError,
    StorageUnavailable,
)
from storage.installations import check_document, check_id
from storage.local.blobs import BlobDir
from storage.models import (
    Conversation,
    ConversationKey,
    DeliveryMark,
    FeedbackTally,
    InboxEntry,
    Lease,
    Status,
    ToolCallClaim,
    ToolCallRecord,
    ToolCallStatus,
    Verdict,
    inbox_stamp,
)

P = ParamSpec("P")
R = TypeVar("R")
ROW_TABLES = ("items", "tool_calls", "inbox", "votes")
CONTENT_GRACE = timedelta(days=1)  # content outlives the history rows that refer to it


def translated(method: Callable[P, R]) -> Callable[P, R]:
    """sqlite's transient failures (a locked or read-only database, an I/O error) become
    `StorageUnavailable`; the contract's own errors pass through."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except sqlite3.OperationalError as exc:
            raise StorageUnavailable(f"sqlite: {exc}") from exc
        except OSError as exc:  # the blob directory: read-only, full, I/O error
            raise StorageUnavailable(f"blobs: {exc}") from exc

    return wrapper


class LocalStore(Store):
    def __init__(self, data_dir: Path, **options: Any) -> None:
        super().__init__(**options)
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.db_path = self.data_dir / "state.sqlite3"
        self.blobs = BlobDir(self.data_dir / "blobs")
        self._local = threading.local()
        self.busy_timeout = 60.0  # seconds a write waits for another writer's lock
        schema = resources.files("storage.local").joinpath("schema.sql").read_text()
        self._connection().executescript(schema)

    # -- connection handling ------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.db_path, timeout=60, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")  # a committed turn survives power loss
            db.execute("PRAGMA busy_timeout=60000")
            self._local.db = db
        return db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        db = self._connection()
        db.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # -- records ------------------------------------------------------------------------

    @translated
    def get(self, key: ConversationKey) -> Conversation | None:
        record = _read_record(self._connection(), key)
        return None if record is None or self._expired(record, self.clock()) else record

    def _expired(self, record: Conversation, now: datetime) -> bool:
        """Past its TTL: treated as absent (sqlite has no TTL of its own)."""
        return record.expires_at < now

    def _live(
        self, db: sqlite3.Connection, key: ConversationKey, now: datetime
    ) -> Conversation | None:
        """The record, or None after deleting an expired one with all its rows, so that a
        conversation recreated after its TTL starts clean."""
        record = _read_record(db, key)
        if record is None or not self._expired(record, now):
            return record
        for table in ("conversations", *ROW_TABLES):
            db.execute(f"DELETE FROM {table} WHERE key = ?", (str(key),))
        return None

    def _save(self, db: sqlite3.Connection, record: Conversation) -> None:
        db.execute(
            "INSERT INTO conversations (key, status, last_activity_at, expires_at, record)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET status=excluded.status,"
            " last_activity_at=excluded.last_activity_at, expires_at=excluded.expires_at,"
            " record=excluded.record",
            (
                str(record.key),
                record.status.value,
                record.last_activity_at.timestamp(),
                record.expires_at.timestamp(),
                record.model_dump_json(),
            ),
        )

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
                record = self.new_record(key, now)
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
                    "status": status or record.status,
                    "stop_by": None,
                    "updated_at": now,
                }
            )
            self._save(db, record)
            inbox = _read_inbox(db, key)
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
            record = _fenced(db, lease)
            expires = now + self.lease_duration
            self._save(db, record.model_copy(update={"lease_expires_at": expires}))
        return lease.model_copy(update={"expires_at": expires, "stop_by": record.stop_by})

    @translated
    def request_stop(self, key: ConversationKey, user: str) -> Conversation | None:
        now = self.clock()
        with self._write() as db:
            record = self._live(db, key, now)
            if record is None or not record.leased(self.takeover_cutoff(now)):
                return None
            record = record.model_copy(update={"stop_by": user})
            self._save(db, record)
        return record

    # -- the atomic write ---------------------------------------------------------------

    @translated
    def apply(self, commit: Commit) -> Committed:
        now = self.clock()
        with self._write() as db:
            if commit.lease is not None:
                record = _fenced(db, commit.lease)
            else:
                record = self._live(db, commit.key, now) or self.new_record(commit.key, now)
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
                if _read_tool(db, commit.key, call.call_id) is None:  # else it says more
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
                update["status"] = commit.status
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
            record = _read_record(db, key)
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
            record = _fenced(db, lease) if lease else _read_record(db, key)
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
            record = _fenced(db, lease) if lease else _read_record(db, key)
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
    ) -> Kept:
        now = self.clock()
        with self._write() as db:
            record = self._live(db, key, now)
            if record is None:
                if not create:
                    raise NotFound(str(key))
                record = self.new_record(key, now)
            if not self._claim(db, f"{key}|{event_id}", now.timestamp(), self.claim_ttl):
                return Kept(kept=False)
            entry = InboxEntry(
                entry_id=f"{inbox_stamp(now)}#{event_id}",
                event_id=event_id,
                payload=payload,
                received_at=now,
            )
            db.execute(
                "INSERT INTO inbox (key, entry_id, entry) VALUES (?, ?, ?)",
                (str(key), entry.entry_id, entry.model_dump_json()),
            )
            participants = record.participants | ({participant} if participant else set())
            update: dict[str, Any] = {
                "inbox_seq": record.inbox_seq + 1,
                "status": Status.RUNNING,
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
                }
            record = record.model_copy(update=update)
            self._save(db, record)
            inbox = _read_inbox(db, key)
        if not take:
            return Kept(kept=True)
        lease = Lease(
            key=key,
            owner=record.lease_owner or "",
            fence=record.fence,
            expires_at=now + self.lease_duration,
            generation=record.generation,
        )
        return Kept(kept=True, lease=lease, record=record.model_copy(update={"inbox": inbox}))

    @translated
    def read_inbox(self, key: ConversationKey, generation: int | None = None) -> list[InboxEntry]:
        return _read_inbox(self._connection(), key)

    # -- ledgers ------------------------------------------------------------------------

    @translated
    def claim_event(self, event_id: str) -> bool:
        with self._write() as db:
            return self._claim(db, event_id, self.clock().timestamp())

    def _claim(
        self, db: sqlite3.Connection, event_id: str, now: float, ttl: timedelta | None = None
    ) -> bool:
        row = db.execute("SELECT expires_at FROM events WHERE event_id = ?", (event_id,))
        found = row.fetchone()
        if found is not None and found[0] > now:
            return False  # an expired claim counts as absent, as with DynamoDB's late TTL
        db.execute(
            "INSERT OR REPLACE INTO events (event_id, expires_at) VALUES (?, ?)",
            (event_id, now + (ttl or self.event_ttl).total_seconds()),
        )
        return True

    @translated
    def begin_tool_call(
        self, lease: Lease, call_id: str, tool_name: str, arguments: str
    ) -> ToolCallClaim:
        now = self.clock()
        with self._write() as db:
            _fenced(db, lease)
            existing = _read_tool(db, lease.key, call_id)
            if existing is not None:
                return ToolCallClaim(record=existing, created=False)
            record = ToolCallRecord(
                key=lease.key,
                call_id=call_id,
                tool_name=tool_name,
                arguments=arguments,
                status=ToolCallStatus.STARTED,
                fence=lease.fence,
                started_at=now,
            )
            self._save_tool(db, record)
        return ToolCallClaim(record=record, created=True)

    @translated
    def complete_tool_call(self, lease: Lease, call_id: str, output: str) -> None:
        now = self.clock()
        with self._write() as db:
            _fenced(db, lease)
            record = _read_tool(db, lease.key, call_id)
            if record is None or record.status is not ToolCallStatus.STARTED:
                raise StorageError(f"tool call {call_id} is not started in {lease.key}")
            record = record.model_copy(
                update={"status": ToolCallStatus.COMPLETED, "output": output, "completed_at": now}
            )
            self._save_tool(db, record)

    @translated
    def get_tool_call(
        self, key: ConversationKey, call_id: str, generation: int | None = None
    ) -> ToolCallRecord | None:
        # Rows of an expired record are deleted with it, so there is one generation here.
        return _read_tool(self._connection(), key, call_id)

    def _save_tool(self, db: sqlite3.Connection, record: ToolCallRecord) -> None:
        expires = (self.clock() + self.state_ttl).timestamp()
        db.execute(
            "INSERT OR REPLACE INTO tool_calls (key, call_id, record, expires_at)"
            " VALUES (?, ?, ?, ?)",
            (str(record.key), record.call_id, record.model_dump_json(), expires),
        )

    # -- operational queries ------------------------------------------------------------

    @translated
    def list_by_status(
        self, status: Status, *, idle_for: timedelta | None = None, limit: int = 100
    ) -> list[Conversation]:
        if status is Status.IDLE:
            return []  # as with the aws backend's index: idle conversations are not listed
        cutoff = (self.clock() - (idle_for or timedelta(0))).timestamp()
        rows = self._connection().execute(
            "SELECT record FROM conversations WHERE status = ? AND last_activity_at <= ?"
            " ORDER BY last_activity_at LIMIT ?",
            (status.value, cutoff, limit),
        )
        return [Conversation.model_validate_json(row[0]) for row in rows]

    @translated
    def count_by_status(self) -> dict[Status, int]:
        rows = self._connection().execute(
            "SELECT status, COUNT(*) FROM conversations GROUP BY status"
        )
        counts = dict.fromkeys(Status, 0)
        counts.update({Status(status): count for status, count in rows})
        return counts

    @translated
    def list_by_team(
        self,
        team: str | None,
        *,
        enterprise: str | None = None,
        statuses: Sequence[Status] = INDEXED,
        limit: int = 1000,
    ) -> list[Conversation]:
        if team is None and enterprise is None:
            raise ValueError("list_by_team needs a team or an enterprise")
        wanted = [status.value for status in statuses if status is not Status.IDLE]
        prefix = ":".join(part for part in (enterprise, team) if part) + ":"
        rows = self._connection().execute(
            f"SELECT record FROM conversations WHERE status IN ({','.join('?' * len(wanted))})"
            " AND substr(key, 1, ?) = ? ORDER BY last_activity_at",
            (*wanted, len(prefix), prefix),
        )
        found = [Conversation.model_validate_json(row[0]) for row in rows]
        return [r for r in found if _of_team(r.key, team, enterprise)][:limit]

    # -- installations ------------------------------------------------------------------

    @translated
    def save_installation(self, install_id: str, document: str) -> None:
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO installations (install_id, document, updated_at)"
                " VALUES (?, ?, ?)",
                (check_id(install_id), check_document(document), self.clock().timestamp()),
            )

    @translated
    def find_installation(self, install_id: str) -> str | None:
        row = (
            self._connection()
            .execute("SELECT document FROM installations WHERE install_id = ?", (install_id,))
            .fetchone()
        )
        return str(row[0]) if row else None

    @translated
    def delete_installation(self, install_id: str) -> bool:
        with self._write() as db:
            gone = db.execute("DELETE FROM installations WHERE install_id = ?", (install_id,))
            return gone.rowcount > 0

    @translated
    def issue_state(self, state: str, ttl: timedelta) -> None:
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO one_time_states (state, expires_at) VALUES (?, ?)",
                (check_id(state, "state"), (self.clock() + ttl).timestamp()),
            )

    @translated
    def consume_state(self, state: str) -> bool:
        with self._write() as db:
            row = db.execute(
                "DELETE FROM one_time_states WHERE state = ? RETURNING expires_at", (state,)
            ).fetchone()
        return row is not None and row[0] >= self.clock().timestamp()

    # -- feedback -----------------------------------------------------------------------

    @translated
    def record_feedback(
        self, key: ConversationKey, answer: str, user: str, verdict: Verdict
    ) -> FeedbackTally | None:
        with self._write() as db:
            record = self._live(db, key, self.clock())
            if record is None:
                return None
            row = db.execute(
                "SELECT verdict FROM votes WHERE key = ? AND answer = ? AND user = ?",
                (str(key), answer, user),
            ).fetchone()
            before = Verdict(row[0]) if row else None
            if before is verdict:
                return record.feedback
            db.execute(
                "INSERT OR REPLACE INTO votes (key, answer, user, verdict) VALUES (?, ?, ?, ?)",
                (str(key), answer, user, verdict.value),
            )
            changes = {verdict: 1, **({before: -1} if before else {})}
            for side, change in changes.items():
                db.execute(
                    "INSERT INTO feedback_totals (verdict, count) VALUES (?, ?) ON CONFLICT"
                    "(verdict) DO UPDATE SET count = count + excluded.count",
                    (side.value, change),
                )
            tally = record.feedback.model_copy(
                update={
                    side.value: getattr(record.feedback, side.value) + change
                    for side, change in changes.items()
                }
            )
            self._save(db, record.model_copy(update={"feedback": tally}))
        return tally

    @translated
    def count_feedback(self) -> FeedbackTally:
        rows = dict(self._connection().execute("SELECT verdict, count FROM feedback_totals"))
        return FeedbackTally(good=max(rows.get("good", 0), 0), bad=max(rows.get("bad", 0), 0))

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
        """Delete expired rows (sqlite has no TTL), checkpoint blobs that no record points
        to and that are older than `orphan_age`, and content blobs not written for a day
        longer than the state TTL (as the S3 lifecycle rule does). Returns how many blobs
        were removed."""
        now = self.clock()
        with self._write() as db:
            expired = [
                row[0]
                for row in db.execute(
                    "SELECT key FROM conversations WHERE expires_at < ?", (now.timestamp(),)
                )
            ]
            for key in expired:
                for table in ("conversations", *ROW_TABLES):
                    db.execute(f"DELETE FROM {table} WHERE key = ?", (key,))
            for table in ("events", "tool_calls", "one_time_states"):
                db.execute(f"DELETE FROM {table} WHERE expires_at < ?", (now.timestamp(),))
            live = {
                record.checkpoint.object_key
                for (text,) in db.execute("SELECT record FROM conversations")
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


def _of_team(key: ConversationKey, team: str | None, enterprise: str | None) -> bool:
    return key.enterprise == enterprise and (team is None or key.team == team)


def _read_inbox(db: sqlite3.Connection, key: ConversationKey) -> list[InboxEntry]:
    rows = db.execute("SELECT entry FROM inbox WHERE key = ? ORDER BY entry_id", (str(key),))
    return [InboxEntry.model_validate_json(row[0]) for row in rows]


def _read_record(db: sqlite3.Connection, key: ConversationKey) -> Conversation | None:
    row = db.execute("SELECT record FROM conversations WHERE key = ?", (str(key),)).fetchone()
    return Conversation.model_validate_json(row[0]) if row else None


def _fenced(db: sqlite3.Connection, lease: Lease) -> Conversation:
    """The record, if `lease` still holds it; else `LeaseLost`."""
    record = _read_record(db, lease.key)
    if record is None or record.fence != lease.fence or record.lease_owner != lease.owner:
        raise LeaseLost(str(lease.key), lease.fence)
    return record


def _read_tool(db: sqlite3.Connection, key: ConversationKey, call_id: str) -> ToolCallRecord | None:
    row = db.execute(
        "SELECT record FROM tool_calls WHERE key = ? AND call_id = ?", (str(key), call_id)
    ).fetchone()
    return ToolCallRecord.model_validate_json(row[0]) if row else None
