"""Several processes keep into the same threads at once, each through its storage bridge:
a keep is made on the process's event loop when no writer is at work, and otherwise fails
at once there (`WouldWait`) and is made again on a worker thread, which waits for sqlite's
lock. Every message lands once, whichever way it went."""

from __future__ import annotations

from pathlib import Path

from storage.local import LocalStore
from tests.storage import keeping_child

PROCESSES = 3
KEEPS = 200  # each
THREADS = 40
AT_ONCE = 8  # keeps in flight in each process, as a burst of Slack requests


def test_keeps_from_several_processes_at_once_each_land_once(tmp_path: Path) -> None:
    LocalStore(tmp_path).close()  # the database exists: the children only open it
    children = [
        keeping_child.start(
            tmp_path, KEEPS, threads=THREADS, prefix=f"P{p}-", together=True, at_once=AT_ONCE
        )
        for p in range(PROCESSES)
    ]
    keeping_child.start_together(children)  # each started, however slowly: they keep at once
    said = [keeping_child.result(child) for child in children]
    store = LocalStore(tmp_path)
    try:
        inboxes = [store.read_inbox(keeping_child.thread_key(n)) for n in range(THREADS)]
    finally:
        store.close()
    landed = sorted(entry.event_id for inbox in inboxes for entry in inbox)
    assert landed == sorted(f"P{p}-{n}" for p in range(PROCESSES) for n in range(KEEPS))
    made_here = sum(s["made_here"] for s in said)
    # Both ways were taken: the loop's, and a worker's after finding another writer.
    assert 0 < made_here < PROCESSES * KEEPS, said
