"""The local backend's replica heartbeats (see `storage.replicas`): one row per replica."""

from __future__ import annotations

from datetime import UTC, datetime

from storage.local.database import Database
from storage.replicas import BEAT_TTL, check_replica


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
