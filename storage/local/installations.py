"""The local backend's installation documents and one-time OAuth states."""

from __future__ import annotations

from datetime import timedelta

from storage.installations import check_document, check_id
from storage.local.database import Database, translated


class Installations(Database):
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
