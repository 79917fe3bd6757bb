"""The local backend's installation documents, one-time OAuth states and removals."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

from storage.installations import Removal, check_document, check_id
from storage.local.database import Database


class Installations:
    def __init__(self, database: Database) -> None:
        self.d = database

    def save(self, install_id: str, document: str) -> None:
        with self.d.write() as db:
            db.execute(
                "INSERT OR REPLACE INTO installations (install_id, document, updated_at)"
                " VALUES (?, ?, ?)",
                (check_id(install_id), check_document(document), self.d.clock().timestamp()),
            )

    def find(self, install_id: str) -> str | None:
        row = (
            self.d.connection()
            .execute("SELECT document FROM installations WHERE install_id = ?", (install_id,))
            .fetchone()
        )
        return str(row[0]) if row else None

    def delete(self, install_id: str, *, only: str | None) -> bool:
        with self.d.write() as db:
            if only is None:
                gone = db.execute("DELETE FROM installations WHERE install_id = ?", (install_id,))
            else:
                gone = db.execute(
                    "DELETE FROM installations WHERE install_id = ? AND document = ?",
                    (install_id, only),
                )
            return gone.rowcount > 0

    def record_removal(self, removal: Removal) -> bool:
        now = self.d.clock().timestamp()
        with self.d.write() as db:
            # sqlite has no TTL: finished removals go as others are recorded (few).
            db.execute("DELETE FROM removals WHERE expires_at < ?", (now,))
            added = db.execute(
                "INSERT OR IGNORE INTO removals (removal_id, removal, expires_at)"
                " VALUES (?, ?, NULL)",
                (check_id(removal.removal_id, "removal id"), removal.model_dump_json()),
            )
            return added.rowcount == 1

    def find_removal(self, removal_id: str) -> Removal | None:
        row = (
            self.d.connection()
            .execute(
                "SELECT removal FROM removals WHERE removal_id = ?"
                " AND (expires_at IS NULL OR expires_at >= ?)",
                (removal_id, self.d.clock().timestamp()),
            )
            .fetchone()
        )
        return Removal.model_validate_json(row[0]) if row else None

    def pending_removals(self) -> list[Removal]:
        rows = (
            self.d.connection()
            .execute("SELECT removal FROM removals WHERE expires_at IS NULL")
            .fetchall()
        )
        found = [Removal.model_validate_json(text) for (text,) in rows]
        return sorted(found, key=lambda removal: removal.at)

    def finish_removal(self, removal_id: str) -> None:
        expires = (self.d.clock() + self.d.policies.event_ttl).timestamp()
        with self.d.write() as db:
            db.execute(
                "UPDATE removals SET expires_at = ? WHERE removal_id = ? AND expires_at IS NULL",
                (expires, removal_id),
            )

    def issue_state(self, state: str, ttl: timedelta) -> bool:
        now = self.d.clock()
        with self.d.write() as db:
            _forget_expired_states(db, now.timestamp())
            added = db.execute(
                "INSERT OR IGNORE INTO one_time_states (state, expires_at) VALUES (?, ?)",
                (check_id(state, "state"), (now + ttl).timestamp()),
            )
            return added.rowcount == 1

    def consume_state(self, state: str) -> bool:
        now = self.d.clock().timestamp()
        with self.d.write() as db:
            row = db.execute(
                "DELETE FROM one_time_states WHERE state = ? RETURNING expires_at", (state,)
            ).fetchone()
            _forget_expired_states(db, now)
        return row is not None and row[0] >= now


def _forget_expired_states(db: sqlite3.Connection, now: float) -> None:
    """sqlite has no TTL: expired states go whenever states are written, so a serving
    process needs no `admin gc` for them (there are few: one per install at most)."""
    db.execute("DELETE FROM one_time_states WHERE expires_at < ?", (now,))
