"""The local backend's writers in one process queue for the database among themselves,
rather than each meeting sqlite's lock and sleeping in its busy handler (which made a
burst's last keeps wait on sleeps, not on writes)."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from storage import ConversationKey
from storage.local import LocalStore
from tests.storage.conftest import KEY

ROOT = Path(__file__).resolve().parents[2]


def test_concurrent_writers_in_one_process_never_meet_the_database_lock(
    tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path)
    # A writer that met another's lock would wait at most 1 ms, then fail as unavailable.
    store.busy_timeout = 0.001

    def keep(i: int) -> bool:
        key = ConversationKey(team="T1", channel="C1", thread_ts=f"1700000000.{i:06d}")
        kept = store.keep(
            key, f"Ev{i}", '{"user":"U1","text":"hi"}', participant="U1", token=uuid.uuid4().hex
        )
        return kept.kept

    try:
        with ThreadPoolExecutor(8) as pool:
            kept = list(pool.map(keep, range(200)))
    finally:
        store.close()
    assert kept == [True] * 200


def test_a_store_opened_while_another_process_creates_the_database_waits_for_it(
    tmp_path: Path,
) -> None:
    """Replicas started together on a fresh data directory: the first is still making the
    new database (its WAL switch or schema, a write lock) when the next one switches it to
    WAL, which sqlite refuses at once, without waiting as it does for writes."""
    db_path = tmp_path / "state.sqlite3"
    first = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    first.execute("CREATE TABLE early (x)")
    first.execute("BEGIN IMMEDIATE")
    first.execute("INSERT INTO early VALUES (1)")
    done = threading.Timer(0.3, lambda: first.execute("COMMIT"))
    done.start()
    try:
        store = LocalStore(tmp_path)
    finally:
        done.join()
        first.close()
    store.keep(KEY, "Ev1", '{"user":"U1","text":"hi"}', participant="U1", token="t1")
    assert store.get(KEY) is not None
    store.close()
