"""Keeping messages on sqlite: a message kept in the thread's inbox (claimed once, refused
past the backlog cap, taking the lease when it is free), the inbox read, refusals told."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storage.errors import NotFound
from storage.local.database import (
    Database,
    capped_backlog,
    read_inbox,
    read_record,
    status_change,
)
from storage.local.ledger import Ledger
from storage.models import (
    REFUSAL_TEXT,
    ConversationKey,
    InboxEntry,
    Lease,
    Refusal,
    Status,
    inbox_entry_id,
    with_refusal,
    with_refusals_told,
)
from storage.writes import KeepRequest, KeepResult


class Keeps:
    def __init__(self, database: Database, ledger: Ledger) -> None:
        self.d = database
        self.ledger = ledger

    def keep(self, request: KeepRequest) -> KeepResult:
        now = self.d.clock()
        with self.d.write() as db:
            record = self.d.live(db, request.key, now)
            if record is None:
                tombstone = read_record(db, request.key)
                lasts = tombstone is not None and now <= self.d.policies.tombstone_until(tombstone)
                if not (request.create or lasts):
                    raise NotFound(str(request.key))
                record = self.d.fresh(db, request.key, now, revive=True)
            claim = f"{request.key}|{request.event_id}"
            refusal = f"{claim}|refused|{request.token}"  # this keep was refused (if it was)
            if not self.ledger.claim(db, claim, now.timestamp(), self.d.policies.claim_ttl):
                if request.token and self.ledger.claimed(db, refusal, now.timestamp()):
                    return KeepResult(kept=False, refused=True)  # our own refusal, retried
                # Our own earlier attempt (same token) is a keep; anything else a duplicate.
                mine = bool(request.token) and any(
                    e.event_id == request.event_id and e.token == request.token
                    for e in read_inbox(db, request.key)
                )
                return KeepResult(kept=mine)
            if request.capped and capped_backlog(db, request.key) >= self.d.policies.backlog_limit:
                # Claimed all the same: another delivery of it is a duplicate, not kept
                # after the thread was told this one was not taken.
                if request.token:
                    self.ledger.claim(db, refusal, now.timestamp(), self.d.policies.claim_ttl)
                told = Refusal(
                    event_id=request.event_id,
                    user=request.participant or "",
                    text=request.refusal_text[:REFUSAL_TEXT],
                    at=now,
                )
                record = with_refusal(record, told)
                self.d.save(db, record)
                return KeepResult(kept=False, refused=True, named=told in record.refused)
            entry = InboxEntry(
                entry_id=inbox_entry_id(now, request.event_id, capped=request.capped),
                event_id=request.event_id,
                payload=request.payload,
                received_at=now,
                token=request.token or "",
            )
            db.execute(
                "INSERT INTO inbox (key, entry_id, entry) VALUES (?, ?, ?)",
                (str(request.key), entry.entry_id, entry.model_dump_json()),
            )
            participants = record.participants | (
                {request.participant} if request.participant else set()
            )
            update: dict[str, Any] = {
                "inbox_seq": record.inbox_seq + 1,
                **status_change(Status.RUNNING, None, now),
                "participants": participants,
                # The first message names the run's starter; later ones never (the holder's
                # commits do): a reply kept while a run waits is not its starter.
                "run_by": record.run_by or request.participant,
                "updated_at": now,
                "last_activity_at": now,
                "expires_at": self.d.policies.expiry(now),
            }
            held = record.lease_owner is not None and record.lease_expires_at is not None
            free = not held or record.lease_expires_at < self.d.policies.takeover_cutoff(now)  # type: ignore[operator]
            take = request.owner is not None and free
            if take:
                update |= {
                    "fence": record.fence + 1,
                    "lease_owner": request.owner,
                    "lease_expires_at": now + self.d.policies.lease_duration,
                    "stop_by": None,
                }
            if request.stop_by:
                update["stop_by"] = request.stop_by
            record = record.model_copy(update=update)
            self.d.save(db, record)
            inbox = read_inbox(db, request.key)
        if not take:
            return KeepResult(kept=True)
        with_inbox = record.model_copy(update={"inbox": inbox})
        return KeepResult(kept=True, lease=Lease.held_in(record), record=with_inbox)

    def read(
        self, key: ConversationKey, generation: int | None, limit: int | None
    ) -> list[InboxEntry]:
        return read_inbox(self.d.connection(), key, limit)

    def refusals_told(self, key: ConversationKey, event_ids: Sequence[str], counted: int) -> None:
        with self.d.write() as db:
            record = read_record(db, key)
            if record is not None and record.refusals_untold:
                self.d.save(db, with_refusals_told(record, event_ids, counted))
