"""The local backend's ledgers: event claims, and tool calls approved, started and completed."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

from storage.errors import (
    LeaseLost,
    StorageError,
)
from storage.ledger import started
from storage.local.database import Database, fenced, read_tool
from storage.models import (
    ConversationKey,
    Lease,
    ToolCallClaim,
    ToolCallRecord,
    ToolCallStatus,
)
from storage.text import plain_text

# What a call may be settled from: a result comes from a started call; a call cancelled
# (a stop came first) was approved or started, and never ran.
_SETTLES_FROM = {
    ToolCallStatus.COMPLETED: (ToolCallStatus.STARTED,),
    ToolCallStatus.CANCELLED: (ToolCallStatus.STARTED, ToolCallStatus.APPROVED),
}


class Ledger:
    def __init__(self, database: Database) -> None:
        self.d = database

    def claim_event(self, event_id: str) -> bool:
        with self.d.write() as db:
            return self.claim(db, event_id, self.d.clock().timestamp())

    def event_claimed(self, event_id: str) -> bool:
        with self.d.write() as db:
            return self.claimed(db, event_id, self.d.clock().timestamp())

    def claimed(self, db: sqlite3.Connection, event_id: str, now: float) -> bool:
        """A live claim of `event_id` (read only)."""
        row = db.execute("SELECT expires_at FROM events WHERE event_id = ?", (event_id,))
        found = row.fetchone()
        return found is not None and found[0] > now

    def claim(
        self, db: sqlite3.Connection, event_id: str, now: float, ttl: timedelta | None = None
    ) -> bool:
        row = db.execute("SELECT expires_at FROM events WHERE event_id = ?", (event_id,))
        found = row.fetchone()
        if found is not None and found[0] > now:
            return False  # an expired claim counts as absent, as with DynamoDB's late TTL
        db.execute(
            "INSERT OR REPLACE INTO events (event_id, expires_at) VALUES (?, ?)",
            (event_id, now + (ttl or self.d.policies.event_ttl).total_seconds()),
        )
        return True

    def begin(self, lease: Lease, call_id: str, tool_name: str, arguments: str) -> ToolCallClaim:
        now = self.d.clock()
        with self.d.write() as db:
            fenced(db, lease)
            existing = read_tool(db, lease.key, call_id)
            if existing is not None and existing.status is not ToolCallStatus.APPROVED:
                return ToolCallClaim(record=existing, created=False)
            record = started(lease, call_id, tool_name, arguments, now)
            self.save_tool(db, record)
        return ToolCallClaim(record=record, created=True)

    def complete(self, lease: Lease, call_id: str, output: str, *, status: ToolCallStatus) -> bool:
        now = self.d.clock()
        with self.d.write() as db:
            try:
                fenced(db, lease)
                held = True
            except LeaseLost:
                held = False  # taken from us (a discard): the call's own fence decides
            record = read_tool(db, lease.key, call_id)
            if not held and (
                record is None
                or record.status is not ToolCallStatus.STARTED
                or record.fence != lease.fence
            ):
                raise LeaseLost(str(lease.key), lease.fence)
            if record is None or record.status not in _SETTLES_FROM.get(status, ()):
                raise StorageError(f"tool call {call_id} is not started in {lease.key}")
            record = record.model_copy(
                update={"status": status, "output": plain_text(output), "completed_at": now}
            )
            self.save_tool(db, record)
        return held

    def retry(self, lease: Lease, call_id: str, *, max_attempts: int) -> ToolCallRecord | None:
        now = self.d.clock()
        with self.d.write() as db:
            fenced(db, lease)
            record = read_tool(db, lease.key, call_id)
            if record is None or record.status is not ToolCallStatus.STARTED:
                return None
            if record.attempts >= max_attempts:
                return None
            record = record.model_copy(
                update={"attempts": record.attempts + 1, "fence": lease.fence, "started_at": now}
            )
            self.save_tool(db, record)
        return record

    def get(
        self, key: ConversationKey, call_id: str, generation: int | None
    ) -> ToolCallRecord | None:
        # Rows of an expired record are deleted with it, so there is one generation here.
        return read_tool(self.d.connection(), key, call_id)

    def save_tool(self, db: sqlite3.Connection, record: ToolCallRecord) -> None:
        expires = (self.d.clock() + self.d.policies.state_ttl).timestamp()
        db.execute(
            "INSERT OR REPLACE INTO tool_calls (key, call_id, record, expires_at)"
            " VALUES (?, ?, ?, ?)",
            (str(record.key), record.call_id, record.model_dump_json(), expires),
        )
