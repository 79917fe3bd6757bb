"""Session items on sqlite: a row each, above the record's floor (`session_floor`)."""

from __future__ import annotations

from typing import Any

from storage.local.database import Database, fenced, read_record
from storage.models import ConversationKey, Lease
from storage.writes import SessionPage


class History:
    def __init__(self, database: Database) -> None:
        self.d = database

    def read_items(self, key: ConversationKey, limit: int | None = None) -> SessionPage:
        db = self.d.connection()
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

    def pop_item(self, key: ConversationKey, lease: Lease | None = None) -> str | None:
        with self.d.write() as db:
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

    def clear_items(self, key: ConversationKey, lease: Lease | None = None) -> None:
        with self.d.write() as db:
            record = fenced(db, lease) if lease else read_record(db, key)
            if record is None:
                return
            self.d.save(db, record.model_copy(update={"session_floor": record.next_seq}))
            db.execute("DELETE FROM items WHERE key = ?", (str(key),))
