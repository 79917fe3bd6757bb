"""The local backend's operational queries: conversations by status, counts, a team's, a
channel's paused threads, the approvals waiting on a person or in a workspace."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from storage.listings import PAUSED_IN_CHANNEL, PAUSED_PAGES, WAITING_PAGES
from storage.local.database import Database
from storage.models import (
    Conversation,
    Status,
)

# The partial index's condition, spelled out (sqlite uses a partial index only for a query
# whose WHERE repeats it, literals and all).
_PAUSED = "status IN ({})".format(", ".join(f"'{status.value}'" for status in PAUSED_IN_CHANNEL))


class ListingQueries:
    def __init__(self, database: Database) -> None:
        self.d = database

    def list_by_status(
        self, status: Status, *, idle_for: timedelta | None, limit: int
    ) -> list[Conversation]:
        if status is Status.IDLE:
            return []  # as with the aws backend's index: idle conversations are not listed
        now = self.d.clock()
        cutoff = (now - (idle_for or timedelta(0))).timestamp()
        rows = self.d.connection().execute(
            "SELECT record FROM conversations WHERE status = ? AND last_activity_at <= ?"
            " AND expires_at >= ? ORDER BY last_activity_at LIMIT ?",
            (status.value, cutoff, now.timestamp(), limit),
        )
        return [Conversation.model_validate_json(row[0]) for row in rows]

    def count_by_status(self) -> dict[Status, int]:
        rows = self.d.connection().execute(
            "SELECT status, COUNT(*) FROM conversations WHERE expires_at >= ? GROUP BY status",
            (self.d.clock().timestamp(),),
        )
        counts = dict.fromkeys(Status, 0)
        counts.update({Status(status): count for status, count in rows})
        return counts

    def list_starting(self, prefix: str, *, statuses: Sequence[Status]) -> list[Conversation]:
        wanted = [status.value for status in statuses]
        rows = self.d.connection().execute(
            f"SELECT record FROM conversations WHERE status IN ({','.join('?' * len(wanted))})"
            " AND substr(key, 1, ?) = ? AND expires_at >= ? ORDER BY last_activity_at",
            (*wanted, len(prefix), prefix, self.d.clock().timestamp()),
        )
        return [Conversation.model_validate_json(row[0]) for row in rows]

    def list_paused_in(
        self, place: str, *, participant: str | None, limit: int
    ) -> list[Conversation]:
        """Through the partial index `conversations_by_place`, newest first: reads at most
        `limit * PAUSED_PAGES` rows of that channel's paused threads."""
        now = self.d.clock()
        rows = (
            self.d.connection()
            .execute(
                "SELECT record FROM conversations INDEXED BY conversations_by_place"
                f" WHERE rtrim(key, '0123456789.') = ? AND {_PAUSED}"
                " ORDER BY last_activity_at DESC LIMIT ?",
                (place + ":", limit * PAUSED_PAGES),
            )
            .fetchall()
        )
        found = [Conversation.model_validate_json(text) for (text,) in rows]
        return [
            record
            for record in found
            if not self.d.expired(record, now)
            and (participant is None or participant in record.participants)
        ][:limit]

    def list_waiting_on(self, workspace: str, user: str, *, limit: int) -> list[Conversation]:
        """Through the partial index `conversations_waiting`: that person's entries only."""
        rows = self.d.connection().execute(
            "SELECT record FROM conversations INDEXED BY conversations_waiting"
            " WHERE waiting_ws = ? AND waiting_user = ? AND waiting_ws IS NOT NULL"
            " AND expires_at >= ? ORDER BY waiting_since DESC LIMIT ?",
            (workspace, user, self.d.clock().timestamp(), limit),
        )
        return [Conversation.model_validate_json(text) for (text,) in rows]

    def list_waiting_in(self, workspace: str, *, limit: int) -> list[Conversation]:
        """That workspace's entries of `conversations_waiting`: at most `limit *
        WAITING_PAGES` rows examined (the most recently waiting of them listed), as the aws
        backend examines that many index entries."""
        rows = self.d.connection().execute(
            "SELECT record, expires_at FROM conversations INDEXED BY conversations_waiting"
            " WHERE waiting_ws = ? AND waiting_ws IS NOT NULL"
            " ORDER BY waiting_user, waiting_since LIMIT ?",
            (workspace, limit * WAITING_PAGES),
        )
        now = self.d.clock().timestamp()
        found = [Conversation.model_validate_json(text) for text, expires in rows if expires >= now]
        found.sort(key=lambda r: r.waiting_since or r.last_activity_at, reverse=True)
        return found[:limit]
