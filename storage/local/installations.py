"""The local backend's installation documents and one-time OAuth states."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

from storage.installations import check_document, check_id
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

    def delete(self, install_id: str) -> bool:
        with self.d.write() as db:
            gone = db.execute("DELETE FROM installations WHERE install_id = ?", (install_id,))
            return gone.rowcount > 0

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
