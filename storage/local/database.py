"""The sqlite3 database under the local backend, shared by its parts: one connection per
thread, every mutation in `BEGIN IMMEDIATE` (the database's write lock, so a
read-check-write is atomic across threads and processes), the clock and the policies
(TTLs, leases, the backlog cap), and the conversation record's rows."""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from importlib import resources
from pathlib import Path

from storage.errors import LeaseLost, WouldWait
from storage.local.loop_time import BLOCKED
from storage.models import (
    UNCAPPED,
    Conversation,
    ConversationKey,
    InboxEntry,
    Lease,
    Status,
    ToolCallRecord,
    waitable,
)
from storage.policies import Policies
from storage.writes import DROPPED_KEPT

ROW_TABLES = ("items", "tool_calls", "inbox", "votes", "summaries")


class Database:
    def __init__(
        self,
        data_dir: Path,
        *,
        clock: Callable[[], datetime],
        policies: Policies,
    ) -> None:
        self.clock = clock
        self.policies = policies
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.db_path = self.data_dir / "state.sqlite3"
        self._local = threading.local()
        # This process's writers queue here, each woken as soon as the one before commits;
        # left to sqlite, a writer that finds the lock held sleeps (1, 2, 5, 10, 15... ms)
        # and a burst's last writes wait on sleeps rather than on the writes before them.
        # Other processes still meet at sqlite's lock (`busy_timeout`).
        self._writer = threading.Lock()
        self.busy_timeout = 60.0  # seconds a write waits for another writer's lock
        schema = resources.files("storage.local").joinpath("schema.sql").read_text()
        self.connection().executescript(schema)
        with self.write() as db:
            _waiting_columns(db)

    # -- connection handling ------------------------------------------------------------

    def connection(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        # Set when it changes, not before each statement: a thread's calls wait as long as
        # `busy_timeout` says, except those that must not wait at all (`waiting_for_nothing`).
        busy_ms = 0 if self.not_waiting else int(self.busy_timeout * 1000)
        if db is None:
            db = sqlite3.connect(self.db_path, timeout=busy_ms / 1000, isolation_level=None)
            _write_ahead_log(db, attempts=1 if self.not_waiting else 100)
            db.execute("PRAGMA synchronous=FULL")  # a committed turn survives power loss
            self._local.db = db
            self._local.busy_ms = busy_ms
        if self._local.busy_ms != busy_ms:
            db.execute(f"PRAGMA busy_timeout={busy_ms}")
            self._local.busy_ms = busy_ms
        return db

    @property
    def not_waiting(self) -> bool:
        return bool(getattr(self._local, "not_waiting", False))

    @contextmanager
    def waiting_for_nothing(self) -> Iterator[None]:
        """Within the block this thread waits for no lock: a write that finds another
        thread's or process's writer at work fails at once (`WouldWait`, or sqlite's
        "database is locked") instead of queueing behind it."""
        before, self._local.not_waiting = self.not_waiting, True
        try:
            yield
        finally:
            self._local.not_waiting = before

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        db = self.connection()
        if getattr(self._local, "together", False):  # one of several calls' transaction
            with _savepoint(db):
                yield db
            return
        with self._transaction(db):
            yield db

    @contextmanager
    def together(self) -> Iterator[None]:
        """One write transaction for the writes made within the block (each a savepoint of
        it: one that fails is undone alone): a single commit, and a single fsync, for
        several calls (`commit_seconds` says how long that commit took)."""
        with self._transaction(self.connection()):
            self._local.together = True
            try:
                yield
            finally:
                self._local.together = False

    @contextmanager
    def _transaction(self, db: sqlite3.Connection) -> Iterator[None]:
        if not self._writer.acquire(blocking=not self.not_waiting):
            raise WouldWait("another thread of this process is writing")
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield
                started = BLOCKED.now()
                db.execute("COMMIT")
                self._local.commit_seconds = BLOCKED.blocked_since(started)
            except BaseException:
                if db.in_transaction:  # else sqlite has rolled it back already
                    db.execute("ROLLBACK")
                raise
            self._local.commits = self.commits_here + 1
        finally:
            self._writer.release()

    @property
    def commit_seconds(self) -> float:
        """How long this thread's last commit was blocked (its fsync, mostly: `BlockedClock`)."""
        return float(getattr(self._local, "commit_seconds", 0.0))

    @property
    def commits_here(self) -> int:
        """Write transactions this thread has committed (each waited for an fsync)."""
        return int(getattr(self._local, "commits", 0))

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # -- records ------------------------------------------------------------------------

    def expired(self, record: Conversation, now: datetime) -> bool:
        """Past its TTL: treated as absent (sqlite has no TTL of its own)."""
        return record.expires_at < now

    def live(
        self, db: sqlite3.Connection, key: ConversationKey, now: datetime
    ) -> Conversation | None:
        """The record, or None when there is none or its state expired (the expired record
        stays, as the conversation's tombstone, until `fresh` replaces it)."""
        record = read_record(db, key)
        return None if record is None or self.expired(record, now) else record

    def fresh(
        self, db: sqlite3.Connection, key: ConversationKey, now: datetime, *, revive: bool
    ) -> Conversation:
        """A new record in place of none, or of an expired one whose rows are deleted so
        that it starts clean; with `revive`, one whose tombstone lasts is brought back
        (`Store.revived`): it says what expired."""
        old = read_record(db, key)
        if old is None:
            return self.policies.new_record(key, now)
        dropped = [entry.payload for entry in read_inbox(db, key, DROPPED_KEPT)]
        queued = backlog(db, key)
        for table in ROW_TABLES:
            db.execute(f"DELETE FROM {table} WHERE key = ?", (str(key),))
        if revive and now <= self.policies.tombstone_until(old):
            return self.policies.revived(old, now, dropped, queued)
        return self.policies.new_record(key, now)

    def save(self, db: sqlite3.Connection, record: Conversation) -> None:
        waiting = record.status is Status.AWAITING_APPROVAL and record.waiting_on is not None
        since = record.waiting_since or record.last_activity_at
        db.execute(
            "INSERT INTO conversations (key, status, last_activity_at, expires_at, record,"
            " waiting_ws, waiting_user, waiting_since) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(key) DO UPDATE SET status=excluded.status,"
            " last_activity_at=excluded.last_activity_at, expires_at=excluded.expires_at,"
            " record=excluded.record, waiting_ws=excluded.waiting_ws,"
            " waiting_user=excluded.waiting_user, waiting_since=excluded.waiting_since",
            (
                str(record.key),
                record.status.value,
                record.last_activity_at.timestamp(),
                record.expires_at.timestamp(),
                record.model_dump_json(),
                record.key.workspace if waiting else None,
                record.waiting_on if waiting else None,
                since.timestamp() if waiting else None,
            ),
        )


def status_change(status: Status, run_by: str | None, now: datetime) -> dict[str, object]:
    """The fields a write that sets `status` changes: the approval listing follows it, as
    the aws backend's index does (`Tables.set_status`)."""
    update: dict[str, object] = {"status": status}
    if status is not Status.AWAITING_APPROVAL:
        update |= {"waiting_on": None, "waiting_since": None}
    elif waitable(run_by):
        update |= {"waiting_on": run_by, "waiting_since": now}
    return update


WAITING_COLUMNS = ("waiting_ws", "waiting_user", "waiting_since")


def _waiting_columns(db: sqlite3.Connection) -> None:
    """The approval listing's columns and their partial index (sparse, like the aws
    backend's `by_waiting`): added to a database made before them, whose conversations
    awaiting approval are listed for their run's starter from then on."""
    present = {row[1] for row in db.execute("PRAGMA table_info(conversations)")}
    missing = [column for column in WAITING_COLUMNS if column not in present]
    for column in missing:
        kind = "REAL" if column == "waiting_since" else "TEXT"
        db.execute(f"ALTER TABLE conversations ADD COLUMN {column} {kind}")
    db.execute(
        "CREATE INDEX IF NOT EXISTS conversations_waiting ON conversations"
        " (waiting_ws, waiting_user, waiting_since) WHERE waiting_ws IS NOT NULL"
    )
    if not missing:
        return
    rows = db.execute(
        "SELECT record FROM conversations WHERE status = ?", (Status.AWAITING_APPROVAL.value,)
    ).fetchall()
    for (text,) in rows:
        record = Conversation.model_validate_json(text)
        if waitable(record.run_by):
            waiting = record.model_copy(
                update={"waiting_on": record.run_by, "waiting_since": record.last_activity_at}
            )
            db.execute(
                "UPDATE conversations SET record = ?, waiting_ws = ?, waiting_user = ?,"
                " waiting_since = ? WHERE key = ?",
                (
                    waiting.model_dump_json(),
                    waiting.key.workspace,
                    waiting.run_by,
                    waiting.last_activity_at.timestamp(),
                    str(waiting.key),
                ),
            )


def _write_ahead_log(db: sqlite3.Connection, attempts: int = 100) -> None:
    """WAL mode (kept in the file, so set once). Processes opening a new database at the
    same moment can find it locked here without sqlite waiting (its busy handler is not
    used for this switch), so a refusal is tried again a little later."""
    for attempt in range(1, attempts + 1):
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == attempts:
                raise
            time.sleep(0.01 * random.uniform(1, 3))


@contextmanager
def _savepoint(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("SAVEPOINT call")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK TO call")
        db.execute("RELEASE call")
        raise
    db.execute("RELEASE call")


def read_inbox(
    db: sqlite3.Connection, key: ConversationKey, limit: int | None = None
) -> list[InboxEntry]:
    rows = db.execute(
        "SELECT entry FROM inbox WHERE key = ? ORDER BY entry_id LIMIT ?",
        (str(key), -1 if limit is None else limit),
    )
    return [InboxEntry.model_validate_json(row[0]) for row in rows]


def backlog(db: sqlite3.Connection, key: ConversationKey) -> int:
    """Entries queued in the thread."""
    row = db.execute("SELECT COUNT(*) FROM inbox WHERE key = ?", (str(key),)).fetchone()
    return int(row[0])


def capped_backlog(db: sqlite3.Connection, key: ConversationKey) -> int:
    """Entries queued in the thread that count against its backlog cap (`capped_entry`:
    not the requests kept past it, whose ids say so)."""
    row = db.execute(
        "SELECT COUNT(*) FROM inbox WHERE key = ? AND entry_id NOT LIKE ?",
        (str(key), f"%#{UNCAPPED}#%"),
    ).fetchone()
    return int(row[0])


def read_record(db: sqlite3.Connection, key: ConversationKey) -> Conversation | None:
    row = db.execute("SELECT record FROM conversations WHERE key = ?", (str(key),)).fetchone()
    return Conversation.model_validate_json(row[0]) if row else None


def fenced(db: sqlite3.Connection, lease: Lease) -> Conversation:
    """The record, if `lease` still holds it; else `LeaseLost`."""
    record = read_record(db, lease.key)
    if record is None or record.fence != lease.fence or record.lease_owner != lease.owner:
        raise LeaseLost(str(lease.key), lease.fence)
    return record


def read_tool(db: sqlite3.Connection, key: ConversationKey, call_id: str) -> ToolCallRecord | None:
    row = db.execute(
        "SELECT record FROM tool_calls WHERE key = ? AND call_id = ?", (str(key), call_id)
    ).fetchone()
    return ToolCallRecord.model_validate_json(row[0]) if row else None
