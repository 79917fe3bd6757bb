"""The atomic write on sqlite: a `Commit` applied in one transaction (fenced, checked
against the checkpoint's version, the session's sequence and the inbox counter), with the
note of the conversation on its person's record when it carries one."""

from __future__ import annotations

from typing import Any

from storage.errors import CheckpointConflict, InboxChanged, SessionConflict
from storage.local.database import Database, fenced, read_tool, status_change
from storage.local.ledger import Ledger
from storage.local.people import People
from storage.models import DeliveryMark
from storage.people import noting
from storage.writes import KEEP, Commit, Committed, summed_up


class Commits:
    def __init__(self, database: Database, ledger: Ledger, people: People) -> None:
        self.d = database
        self.ledger = ledger
        self.people = people

    def apply(self, commit: Commit) -> Committed:
        now = self.d.clock()
        with self.d.write() as db:
            if commit.lease is not None:
                record = fenced(db, commit.lease)
            else:
                record = self.d.live(db, commit.key, now) or self.d.fresh(
                    db, commit.key, now, revive=False
                )
            if (
                commit.expected_version is not None
                and record.checkpoint_version != commit.expected_version
            ):
                raise CheckpointConflict(
                    str(commit.key), commit.expected_version, record.checkpoint_version
                )
            if commit.inbox_seen is not None and commit.inbox_seen != record.inbox_seq:
                raise InboxChanged(f"{commit.key}: inbox at {record.inbox_seq}")
            for entry_id in commit.consume:
                db.execute(
                    "DELETE FROM inbox WHERE key = ? AND entry_id = ?", (str(commit.key), entry_id)
                )
            if commit.base_seq is not None and commit.base_seq != record.next_seq:
                raise SessionConflict(
                    f"{commit.key}: items staged at seq {commit.base_seq}, now {record.next_seq}"
                )
            next_seq = record.next_seq
            armed = []
            for call in commit.arm:  # calls approved with this checkpoint (not started yet)
                if read_tool(db, commit.key, call.call_id) is None:  # else it says more
                    self.ledger.save_tool(db, call)
                    armed.append(call.call_id)
            for item in commit.items:
                db.execute(
                    "INSERT INTO items (key, seq, data) VALUES (?, ?, ?)",
                    (str(commit.key), next_seq, item),
                )
                next_seq += 1
            update: dict[str, Any] = {"updated_at": now, "next_seq": next_seq}
            if commit.summary is not None:
                summed_up(commit, record.session_floor, next_seq)
                db.execute(
                    "INSERT INTO summaries (key, through, text) VALUES (?, ?, ?)"
                    " ON CONFLICT(key) DO UPDATE SET through=excluded.through, text=excluded.text",
                    (str(commit.key), commit.summary.through, commit.summary.text),
                )
                update["summary_seq"] = commit.summary.through
            if commit.checkpoint is not KEEP:
                update["checkpoint"] = (
                    commit.checkpoint.model_copy(update={"session_seq": next_seq})  # type: ignore[union-attr]
                    if commit.checkpoint is not None
                    else None
                )
            if commit.status is not None:
                update |= status_change(commit.status, commit.run_by, now)
            if commit.run_by is not None:
                update["run_by"] = commit.run_by
            if commit.clear_expiry:
                update["expired_from"] = None
            if commit.clear_stop:
                update["stop_by"] = None
            if commit.release:
                update |= {"lease_owner": None, "lease_expires_at": None, "stop_by": None}
            if commit.touch:
                update |= {"last_activity_at": now, "expires_at": self.d.policies.expiry(now)}
            record = record.model_copy(update=update)
            delivery = commit.delivery
            if delivery is None and commit.delivered:
                delivery = DeliveryMark(version=record.checkpoint_version)
            if delivery is not None:
                record = record.model_copy(
                    update={
                        "delivered_version": delivery.version,
                        "delivered_count": delivery.count,
                        "delivery_attempts": delivery.attempts,
                        "delivery_retry_at": delivery.retry_at,
                        "delivery_error": delivery.error,
                    }
                )
            self.d.save(db, record)
            if commit.note is not None:
                self.people.change_within(db, commit.note, noting(commit.key), now)
        wrote_pointer = commit.checkpoint is not KEEP and commit.checkpoint is not None
        session_known = commit.base_seq is not None or bool(commit.items) or wrote_pointer
        return Committed(
            key=commit.key,
            next_seq=record.next_seq if session_known else None,
            checkpoint=record.checkpoint if wrote_pointer else None,
            status=commit.status,
            armed=tuple(armed),
        )
