"""sqlite3 backend (the default): stdlib sqlite3 for records and a directory of write-once
blobs.

The store only wires its parts and translates errors (`errors.translated`), as the aws
backend's does; every part takes the one `Database` (connections, write transaction, clock,
policies), where the record's rows are read and saved: the record and its lease (`records`),
keeping and reading messages (`keeps`), the atomic write (`commits`), session items
(`history`), ledgers (`ledger`), operational queries (`queries`), verdicts on answers
(`feedback`), installations, one-time states and removals (`installations`), people
(`people`), replicas' heartbeats (`replicas`), blobs (`blobs`), `admin gc` (`housekeeping`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from storage.base import Store
from storage.errors import StorageUnavailable, WouldWait
from storage.installations import Removal
from storage.listings import INDEXED
from storage.local.blobs import BlobDir
from storage.local.commits import Commits
from storage.local.database import Database
from storage.local.errors import translated
from storage.local.feedback import Feedback
from storage.local.history import History, Summaries
from storage.local.housekeeping import Housekeeping
from storage.local.installations import Installations
from storage.local.keeps import Keeps
from storage.local.ledger import Ledger
from storage.local.loop_time import BLOCKED, LoopTime
from storage.local.people import People
from storage.local.queries import ListingQueries
from storage.local.records import Records
from storage.local.replicas import Replicas
from storage.models import (
    Conversation,
    ConversationKey,
    FeedbackTally,
    InboxEntry,
    Lease,
    Status,
    ToolCallClaim,
    ToolCallRecord,
    ToolCallStatus,
    Verdict,
)
from storage.people import Change, Person, PersonKey
from storage.writes import Commit, Committed, KeepResult, SessionPage

R = TypeVar("R")

# A conversation's own few rows in one short transaction (a checkpoint blob at most): the
# calls of every turn, which `run_here` may make on the event loop's thread. Listings, the
# history read in full, files people shared and housekeeping go to a worker thread.
QUICK_CALLS = frozenset(
    {
        "get",
        "acquire",
        "renew",
        "stop_requested",
        "keep",
        "read_inbox",
        "claim_event",
        "apply",
        "commit",
        "release",
        "set_status",
        "append_items",
        "pop_item",
        "begin_tool_call",
        "complete_tool_call",
        "retry_tool_call",
        "get_tool_call",
        "beat",
    }
)


class LocalStore(Summaries, Store):
    def __init__(self, data_dir: Path, **options: Any) -> None:
        super().__init__(**options)
        self.database = Database(
            data_dir,
            clock=lambda: self.clock(),
            lease_duration=self.lease_duration,
            lease_skew=self.lease_skew,
            state_ttl=self.state_ttl,
            tombstone_ttl=self.tombstone_ttl,
            event_ttl=self.event_ttl,
            claim_ttl=self.claim_ttl,
            backlog_limit=self.backlog_limit,
        )
        self.data_dir = self.database.data_dir
        self.db_path = self.database.db_path
        self.blobs = BlobDir(self.data_dir / "blobs")
        self.records = Records(self.database)
        self.ledger = Ledger(self.database)
        self.keeps = Keeps(self.database, self.ledger)
        self.people = People(self.database)
        self.commits = Commits(self.database, self.ledger, self.people)
        self.history = History(self.database)
        self.queries = ListingQueries(self.database)
        self.feedback = Feedback(self.database)
        self.installations = Installations(self.database)
        self.replicas = Replicas(self.database)
        self.housekeeping = Housekeeping(self.database, self.blobs)
        self.loop_time = LoopTime()  # how long the calls made by `run_here` hold the loop

    @property
    def busy_timeout(self) -> float:
        """Seconds a write waits for another process's writer (sqlite's lock)."""
        return self.database.busy_timeout

    @busy_timeout.setter
    def busy_timeout(self, seconds: float) -> None:
        self.database.busy_timeout = seconds

    def close(self) -> None:
        self.database.close()

    runs_calls_here = True

    def run_here(self, call: Callable[[], R]) -> R:
        """A quick call of this store's (`QUICK_CALLS`) made on this thread when it needs no
        wait: handing an sqlite write of a few rows to a worker thread and back costs more
        CPU than the write. A call that would wait for another writer is `WouldWait`, and
        so is every call while such calls hold the loop too long (`LoopTime`: a slow disk)."""
        if not self._quick(call):
            raise WouldWait("not one of the store's quick calls")
        if not self.loop_time.allows():
            raise WouldWait("the disk is slow: the call would hold the loop")
        started, commits = BLOCKED.now(), self.database.commits_here
        with self.database.waiting_for_nothing():
            try:
                return call()
            except StorageUnavailable as exc:  # sqlite's "database is locked", at once
                raise WouldWait(str(exc)) from exc
            finally:
                # Only a commit waited for the disk: a read, or a call refused before its
                # write (`WouldWait`), says nothing of the fsync.
                if self.database.commits_here != commits:
                    self.loop_time.took(BLOCKED.blocked_since(started))

    def run_together(self, calls: Sequence[Callable[[], R]]) -> list[R | Exception]:
        """Quick calls made at once on this thread in one transaction, each in a savepoint:
        a burst's keeps share one commit and its fsync instead of one each. Only the commit
        is timed (`LoopTime`): it is what waits for the disk, and a long group of quick
        calls says nothing of it."""
        if not all(self._quick(call) for call in calls):
            raise WouldWait("not all of them are the store's quick calls")
        if not self.loop_time.allows():
            raise WouldWait("the disk is slow: the calls would hold the loop")
        outcomes: list[R | Exception] = []
        with self.database.waiting_for_nothing():
            try:
                with self.database.together():
                    db = self.database.connection()
                    for call in calls:
                        try:
                            outcomes.append(call())
                        except Exception as exc:  # the contract's errors: that call's alone
                            outcomes.append(exc)
                        if not db.in_transaction:  # sqlite gave the whole write up
                            raise StorageUnavailable("sqlite: the transaction was rolled back")
            except (sqlite3.OperationalError, StorageUnavailable) as exc:
                if not outcomes:  # another process's writer, met at once: nothing was made
                    raise WouldWait(str(exc)) from exc
                raise StorageUnavailable(f"sqlite: {exc}") from exc  # none of them was made
        self.loop_time.took(self.database.commit_seconds)
        return outcomes

    def _quick(self, call: Callable[[], Any]) -> bool:
        function = getattr(call, "func", call)
        return getattr(function, "__self__", None) is self and function.__name__ in QUICK_CALLS

    def collect_garbage(self, *, orphan_age: timedelta = timedelta(hours=1)) -> int:
        """Delete expired rows, orphan checkpoint blobs older than `orphan_age` and content
        no longer kept (see `Housekeeping.collect`). Returns how many blobs were removed."""
        return self.housekeeping.collect(orphan_age=orphan_age)

    # -- records and leases -------------------------------------------------------------

    @translated
    def get(self, key: ConversationKey) -> Conversation | None:
        return self.records.get(key)

    @translated
    def expired_record(self, key: ConversationKey) -> Conversation | None:
        return self.records.expired_record(key)

    @translated
    def acquire(
        self,
        key: ConversationKey,
        owner: str,
        *,
        status: Status | None = None,
        force: bool = False,
        create: bool = True,
        takeover_from: str | None = None,
    ) -> tuple[Lease, Conversation]:
        return self.records.acquire(
            key, owner, status=status, force=force, create=create, takeover_from=takeover_from
        )

    @translated
    def renew(self, lease: Lease, *, working: bool = False) -> Lease:
        return self.records.renew(lease, working=working)

    # -- the atomic write ---------------------------------------------------------------

    @translated
    def apply(self, commit: Commit) -> Committed:
        return self.commits.apply(commit)

    # -- session ------------------------------------------------------------------------

    @translated
    def read_items(self, key: ConversationKey, limit: int | None = None) -> SessionPage:
        return self.history.read_items(key, limit)

    @translated
    def pop_item(self, key: ConversationKey, lease: Lease | None = None) -> str | None:
        return self.history.pop_item(key, lease)

    @translated
    def clear_items(self, key: ConversationKey, lease: Lease | None = None) -> None:
        self.history.clear_items(key, lease)

    # -- inbox --------------------------------------------------------------------------

    @translated
    def keep(
        self,
        key: ConversationKey,
        event_id: str,
        payload: str,
        *,
        create: bool = True,
        participant: str | None = None,
        owner: str | None = None,
        token: str | None = None,
        stop_by: str | None = None,
        refusal_text: str = "",
        capped: bool = True,
    ) -> KeepResult:
        return self.keeps.keep(
            key,
            event_id,
            payload,
            create=create,
            participant=participant,
            owner=owner,
            token=token,
            stop_by=stop_by,
            refusal_text=refusal_text,
            capped=capped,
        )

    @translated
    def read_inbox(
        self, key: ConversationKey, generation: int | None = None, limit: int | None = None
    ) -> list[InboxEntry]:
        return self.keeps.read(key, generation, limit)

    @translated
    def refusals_told(
        self, key: ConversationKey, event_ids: Sequence[str], counted: int = 0
    ) -> None:
        self.keeps.refusals_told(key, event_ids, counted)

    # -- ledgers ------------------------------------------------------------------------

    @translated
    def claim_event(self, event_id: str) -> bool:
        return self.ledger.claim_event(event_id)

    @translated
    def begin_tool_call(
        self, lease: Lease, call_id: str, tool_name: str, arguments: str
    ) -> ToolCallClaim:
        return self.ledger.begin(lease, call_id, tool_name, arguments)

    @translated
    def complete_tool_call(
        self,
        lease: Lease,
        call_id: str,
        output: str,
        *,
        status: ToolCallStatus = ToolCallStatus.COMPLETED,
    ) -> bool:
        return self.ledger.complete(lease, call_id, output, status=status)

    @translated
    def retry_tool_call(
        self, lease: Lease, call_id: str, *, max_attempts: int
    ) -> ToolCallRecord | None:
        return self.ledger.retry(lease, call_id, max_attempts=max_attempts)

    @translated
    def get_tool_call(
        self, key: ConversationKey, call_id: str, generation: int | None = None
    ) -> ToolCallRecord | None:
        return self.ledger.get(key, call_id, generation)

    # -- operational queries ------------------------------------------------------------

    @translated
    def list_by_status(
        self, status: Status, *, idle_for: timedelta | None = None, limit: int = 100
    ) -> list[Conversation]:
        return self.queries.list_by_status(status, idle_for=idle_for, limit=limit)

    @translated
    def count_by_status(self) -> dict[Status, int]:
        return self.queries.count_by_status()

    @translated
    def list_by_team(
        self,
        team: str | None,
        *,
        enterprise: str | None = None,
        statuses: Sequence[Status] = INDEXED,
        limit: int = 1000,
    ) -> list[Conversation]:
        return self.queries.list_by_team(
            team, enterprise=enterprise, statuses=statuses, limit=limit
        )

    @translated
    def list_paused_in(
        self,
        team: str,
        channel: str,
        *,
        enterprise: str | None = None,
        participant: str | None = None,
        limit: int = 50,
    ) -> list[Conversation]:
        return self.queries.list_paused_in(
            team, channel, enterprise=enterprise, participant=participant, limit=limit
        )

    @translated
    def list_waiting_on(
        self, team: str, user: str, *, enterprise: str | None = None, limit: int = 20
    ) -> list[Conversation]:
        return self.queries.list_waiting_on(team, user, enterprise=enterprise, limit=limit)

    @translated
    def list_waiting_in(
        self, team: str, *, enterprise: str | None = None, limit: int = 50
    ) -> list[Conversation]:
        return self.queries.list_waiting_in(team, enterprise=enterprise, limit=limit)

    # -- people -------------------------------------------------------------------------

    @translated
    def get_person(self, key: PersonKey) -> Person | None:
        return self.people.get(key)

    @translated
    def _change_person(self, key: PersonKey, change: Change) -> Person | None:
        return self.people.change(key, change)

    # -- replicas -----------------------------------------------------------------------

    @translated
    def beat(self, replica: str) -> None:
        self.replicas.beat(replica)

    @translated
    def beats(self) -> dict[str, datetime]:
        return self.replicas.beats()

    # -- installations ------------------------------------------------------------------

    @translated
    def save_installation(self, install_id: str, document: str) -> None:
        self.installations.save(install_id, document)

    @translated
    def find_installation(self, install_id: str) -> str | None:
        return self.installations.find(install_id)

    @translated
    def delete_installation(self, install_id: str, *, only: str | None = None) -> bool:
        return self.installations.delete(install_id, only)

    @translated
    def issue_state(self, state: str, ttl: timedelta) -> bool:
        return self.installations.issue_state(state, ttl)

    @translated
    def consume_state(self, state: str) -> bool:
        return self.installations.consume_state(state)

    @translated
    def record_removal(self, removal: Removal) -> bool:
        return self.installations.record_removal(removal)

    @translated
    def find_removal(self, removal_id: str) -> Removal | None:
        return self.installations.find_removal(removal_id)

    @translated
    def pending_removals(self) -> list[Removal]:
        return self.installations.pending_removals()

    @translated
    def finish_removal(self, removal_id: str) -> None:
        self.installations.finish_removal(removal_id)

    # -- feedback -----------------------------------------------------------------------

    @translated
    def record_feedback(
        self, key: ConversationKey, answer: str, user: str, verdict: Verdict
    ) -> FeedbackTally | None:
        return self.feedback.record(key, answer, user, verdict)

    @translated
    def count_feedback(self) -> FeedbackTally:
        return self.feedback.count()

    # -- blobs --------------------------------------------------------------------------

    @translated
    def put_blob(self, object_key: str, data: bytes) -> None:
        self.blobs.put_new(object_key, data)

    @translated
    def refresh_blob(self, object_key: str, data: bytes) -> None:
        self.blobs.refresh(object_key, data)

    @translated
    def get_blob(self, object_key: str) -> bytes:
        return self.blobs.get(object_key)

    @translated
    def delete_blob(self, object_key: str) -> None:
        self.blobs.delete(object_key)


__all__ = ["LocalStore"]
