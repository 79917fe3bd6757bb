"""The local backend's person records (see `storage.people`): a row each, changed inside
one write transaction (the database's write lock makes the read, change, write atomic): its
own, or a commit's that notes a conversation for its person (`Commit.note`)."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from storage.local.database import Database
from storage.people import PERSON_TTL, Change, Person, PersonKey, blank, changed


class People:
    def __init__(self, database: Database) -> None:
        self.d = database

    def get(self, key: PersonKey) -> Person | None:
        row = (
            self.d.connection()
            .execute(
                "SELECT record, version FROM people WHERE key = ? AND expires_at >= ?",
                (str(key), self.d.clock().timestamp()),
            )
            .fetchone()
        )
        return Person.from_document(key, row[0], row[1]) if row else None

    def change(self, key: PersonKey, change: Change) -> Person | None:
        with self.d.write() as db:
            return self.change_within(db, key, change, self.d.clock())

    def change_within(
        self, db: sqlite3.Connection, key: PersonKey, change: Change, now: datetime
    ) -> Person | None:
        """The change, inside a write transaction the caller holds (a commit's)."""
        row = db.execute(
            "SELECT record, version, expires_at FROM people WHERE key = ?", (str(key),)
        ).fetchone()
        if row is None or row[2] < now.timestamp():  # forgotten: starts afresh
            person = blank(key, now).model_copy(update={"version": row[1] if row else 0})
        else:
            person = Person.from_document(key, row[0], row[1])
        new = changed(person, change, now)
        if new is None:
            return None
        db.execute(
            "INSERT INTO people (key, record, version, expires_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT(key) DO UPDATE SET record=excluded.record,"
            " version=excluded.version, expires_at=excluded.expires_at",
            (str(key), new.document(), new.version, (now + PERSON_TTL).timestamp()),
        )
        return new
