"""Session items on sqlite: a row each, above the record's floor (`session_floor`). A row
that is not JSON is a gap in the history (logged): reads leave it out, a pop drops it. And
the conversation's summary of them (`Store.read_summary`): one row in `summaries`, written
(replaced) by the commit that carries one (`commits`), deleted with the other rows."""

from __future__ import annotations

import logging

from storage.local.database import Database, fenced, read_record
from storage.models import Conversation, ConversationKey, Lease, Summary, applies
from storage.text import decodes
from storage.writes import SessionPage

log = logging.getLogger(__name__)

NEWEST_FIRST = "SELECT seq, data FROM items WHERE key = ? AND seq >= ? ORDER BY seq DESC"


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
            newest_first: list[str] = []
            if limit is None or limit > 0:
                # Read lazily: the cursor goes past unreadable rows, no further than needed.
                for seq, data in db.execute(NEWEST_FIRST, (str(key), record.session_floor)):
                    if not decodes(data):
                        _unreadable(key, seq)
                        continue
                    newest_first.append(data)
                    if len(newest_first) == limit:
                        break
        finally:
            db.execute("COMMIT")
        return SessionPage(items=newest_first[::-1], next_seq=record.next_seq)

    def pop_item(self, key: ConversationKey, lease: Lease | None = None) -> str | None:
        with self.d.write() as db:
            record = fenced(db, lease) if lease else read_record(db, key)
            if record is None:
                return None
            # Unreadable rows on top go with the pop, in the same write, as in the SDK's
            # SQLiteSession: only a readable item is ever returned.
            while True:
                row = db.execute(
                    f"{NEWEST_FIRST} LIMIT 1", (str(key), record.session_floor)
                ).fetchone()
                if row is None:
                    return None
                seq, data = row
                db.execute("DELETE FROM items WHERE key = ? AND seq = ?", (str(key), seq))
                if decodes(data):
                    return str(data)
                _unreadable(key, seq)

    def clear_items(self, key: ConversationKey, lease: Lease | None = None) -> None:
        with self.d.write() as db:
            record = fenced(db, lease) if lease else read_record(db, key)
            if record is None:
                return
            self.d.save(db, record.model_copy(update={"session_floor": record.next_seq}))
            db.execute("DELETE FROM items WHERE key = ?", (str(key),))


class Summaries:
    def __init__(self, database: Database) -> None:
        self.d = database

    def read_summary(self, record: Conversation) -> Summary | None:
        if not applies(record):
            return None
        row = (
            self.d.connection()
            .execute("SELECT through, text FROM summaries WHERE key = ?", (str(record.key),))
            .fetchone()
        )
        if row is None or row[0] != record.summary_seq:
            return None
        return Summary(through=row[0], text=row[1])


def _unreadable(key: ConversationKey, seq: int) -> None:
    log.error("%s: session item %d is not JSON: a gap in the history", key, seq)
