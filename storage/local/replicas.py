"""The local backend's replica heartbeats (see `storage.replicas`): one row per replica."""

from __future__ import annotations

from datetime import UTC, datetime

from storage.local.database import Database, translated
from storage.replicas import BEAT_TTL, check_replica


class Replicas(Database):
    @translated
    def beat(self, replica: str) -> None:
        now = self.clock().timestamp()
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO replicas (replica, beat_at) VALUES (?, ?)",
                (check_replica(replica), now),
            )
            # sqlite has no TTL: replicas gone for good are forgotten as others beat.
            db.execute("DELETE FROM replicas WHERE beat_at < ?", (now - BEAT_TTL.total_seconds(),))

    @translated
    def beats(self) -> dict[str, datetime]:
        rows = self._connection().execute("SELECT replica, beat_at FROM replicas").fetchall()
        return {str(name): datetime.fromtimestamp(at, tz=UTC) for name, at in rows}
