"""Housekeeping on sqlite (`admin gc`): expired rows, orphan checkpoint blobs and content
no longer kept go, as DynamoDB's TTL and the S3 lifecycle rule make them go on aws."""

from __future__ import annotations

from datetime import timedelta

from storage.content import CONTENT_PREFIX
from storage.local.blobs import BlobDir
from storage.local.database import ROW_TABLES, Database
from storage.models import Conversation

CONTENT_GRACE = timedelta(days=1)  # content outlives the history rows that refer to it


class Housekeeping:
    def __init__(self, database: Database, blobs: BlobDir) -> None:
        self.d = database
        self.blobs = blobs

    def collect(self, *, orphan_age: timedelta = timedelta(hours=1)) -> int:
        """Delete expired rows (sqlite has no TTL; an expired record itself once its
        tombstone's time is over too), checkpoint blobs that no live record points to and
        that are older than `orphan_age`, and content blobs not written for a day
        longer than the state TTL (as the S3 lifecycle rule does). Returns how many blobs
        were removed."""
        now = self.d.clock()
        with self.d.write() as db:
            # A record whose state expired stays as its conversation's tombstone (its
            # queued messages with it, to be named) until `tombstone_ttl` later.
            expired = [
                row[0]
                for row in db.execute(
                    "SELECT key FROM conversations WHERE expires_at < ?", (now.timestamp(),)
                )
            ]
            gone = (now - self.d.policies.tombstone_ttl).timestamp()
            for key in expired:
                db.execute(
                    "DELETE FROM conversations WHERE key = ? AND expires_at < ?", (key, gone)
                )
                for table in ROW_TABLES:
                    if table != "inbox":
                        db.execute(f"DELETE FROM {table} WHERE key = ?", (key,))
            db.execute("DELETE FROM inbox WHERE key NOT IN (SELECT key FROM conversations)")
            for table in ("events", "tool_calls", "one_time_states"):
                db.execute(f"DELETE FROM {table} WHERE expires_at < ?", (now.timestamp(),))
            live = {  # an expired state's checkpoint goes with it
                record.checkpoint.object_key
                for (text,) in db.execute(
                    "SELECT record FROM conversations WHERE expires_at >= ?", (now.timestamp(),)
                )
                if (record := Conversation.model_validate_json(text)).checkpoint
            }
        cutoff = (now - orphan_age).timestamp()
        removed = 0
        for object_key, mtime in self.blobs.keys("checkpoints"):
            if object_key not in live and mtime < cutoff:
                self.blobs.delete(object_key)
                removed += 1
        retained = (now - self.d.policies.state_ttl - CONTENT_GRACE).timestamp()
        for object_key, mtime in self.blobs.keys(CONTENT_PREFIX.rstrip("/")):
            if mtime < retained:
                self.blobs.delete(object_key)
                removed += 1
        return removed
