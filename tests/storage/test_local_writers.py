"""The local backend's writers in one process queue for the database among themselves,
rather than each meeting sqlite's lock and sleeping in its busy handler (which made a
burst's last keeps wait on sleeps, not on writes)."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from storage import ConversationKey
from storage.local import LocalStore


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
