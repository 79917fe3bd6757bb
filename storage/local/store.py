"""sqlite3 backend (the default): stdlib sqlite3 for records and a directory of write-once
blobs. Every part takes the one `Database` (connections, write transaction, clock,
policies): the quick calls of a turn can then share one transaction (`run_together`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from storage.base import Store
from storage.errors import StorageError, StorageUnavailable, Translating, WouldWait
from storage.local.blobs import BlobDir
from storage.local.commits import Commits
from storage.local.database import Database
from storage.local.feedback import Feedback
from storage.local.history import History, Summaries
from storage.local.housekeeping import Housekeeping
from storage.local.installations import Installations
from storage.local.keeps import Keeps
from storage.local.ledger import Ledger
from storage.local.loop_time import BLOCKED, LoopTime
from storage.local.people import People
from storage.local.queries import ListingQueries
from storage.local.records import Records, Replicas

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


def unavailable(exc: BaseException) -> StorageError | None:
    """sqlite's transient failures (a locked or read-only database, an I/O error) and the
    blob directory's (read-only, full, an I/O error): callers never see sqlite3 or the file
    system."""
    if isinstance(exc, sqlite3.OperationalError):
        return StorageUnavailable(f"sqlite: {exc}")
    if isinstance(exc, OSError):
        return StorageUnavailable(f"blobs: {exc}")
    return None


class LocalStore(Store):
    blobs: BlobDir
    translating = Translating(unavailable)

    def __init__(self, data_dir: Path, **options: Any) -> None:
        super().__init__(**options)
        self.database = Database(
            data_dir,
            clock=lambda: self.clock(),
            policies=self,
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
        self.summaries = Summaries(self.database)
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


__all__ = ["LocalStore"]
