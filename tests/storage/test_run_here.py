"""Storage calls made on the event loop's own thread (`Store.run_here`): the embedded store's
quick calls (a conversation's few rows) are made there when they need no wait, since handing
them to a worker thread and back costs more CPU than the sqlite write; a call that would wait
for another writer (a thread of this process, or another process) still waits on a worker
thread, with the loop free meanwhile. Every call of the aws store goes to a worker thread."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest

from storage import StorageCalls, Store
from storage.errors import WouldWait
from storage.local import LocalStore
from storage.models import Status
from tests.storage.conftest import KEY

HOLD_SECONDS = 0.6  # how long another process holds sqlite's write lock
TICK = 0.01


class CountingPool(ThreadPoolExecutor):
    """A worker pool that counts the calls handed to it, by name."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.names: list[str] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        call = getattr(fn, "func", fn)
        self.names.append(getattr(call, "__name__", "?"))
        return super().submit(fn, *args, **kwargs)


@contextmanager
def counting_calls(store: Store) -> Iterator[tuple[StorageCalls, CountingPool]]:
    """The bridge to `store`, its calls made on worker threads counted."""
    calls = StorageCalls(store)
    pool = CountingPool()
    calls.pool.shutdown()
    calls.urgent_pool.shutdown()
    calls.pool = calls.urgent_pool = pool
    try:
        yield calls, pool
    finally:
        pool.shutdown()


@pytest.fixture
def counted(store: Store) -> Iterator[tuple[StorageCalls, CountingPool]]:
    with counting_calls(store) as counted:
        yield counted


async def test_a_turns_calls_run_on_the_loop_locally_and_on_a_worker_on_aws(
    store: Store, counted: tuple[StorageCalls, CountingPool]
) -> None:
    calls, pool = counted
    kept = await calls.urgent(store.keep, KEY, "E1", '{"text":"hi"}', owner="w")
    assert kept.kept and kept.lease is not None
    await calls(store.renew, kept.lease)
    await calls(store.release, kept.lease, status=Status.IDLE)
    record = await calls(store.get, KEY)
    assert record is not None and record.status is Status.IDLE
    if isinstance(store, LocalStore):
        assert pool.names == []
    else:
        assert pool.names == ["keep", "renew", "release", "get"]


async def test_a_listing_goes_to_a_worker_thread_on_either_backend(
    store: Store, counted: tuple[StorageCalls, CountingPool]
) -> None:
    calls, pool = counted
    assert await calls(store.list_by_status, Status.RUNNING) == []
    assert pool.names == ["list_by_status"]


def test_only_the_stores_own_quick_calls_run_here(local_store: LocalStore) -> None:
    assert local_store.run_here(functools.partial(local_store.get, KEY)) is None
    other = LocalStore(local_store.data_dir)
    try:
        with pytest.raises(WouldWait):  # the same call, of another store
            local_store.run_here(functools.partial(other.get, KEY))
    finally:
        other.close()
    with pytest.raises(WouldWait):
        local_store.run_here(functools.partial(local_store.list_by_status, Status.RUNNING))
    with pytest.raises(WouldWait):
        local_store.run_here(lambda: None)


async def test_a_keep_that_finds_another_process_writing_waits_off_the_loop(
    local_store: LocalStore,
) -> None:
    """Another process holds sqlite's write lock: the keep is not made on the loop (it
    would stop every request until the lock is given back), nor refused; it waits on a
    worker thread, and the loop goes on meanwhile."""
    holder = hold_write_lock(local_store, HOLD_SECONDS)
    with counting_calls(local_store) as (calls, pool):
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(TICK)
                ticks += 1

        ticker = asyncio.create_task(tick())
        loop = asyncio.get_running_loop()
        started = loop.time()
        kept = await calls.urgent(local_store.keep, KEY, "E1", '{"text":"hi"}', owner="w")
        waited = loop.time() - started
        ticker.cancel()
    assert holder.wait(10) == 0
    assert kept.kept
    assert pool.names == ["keep"]
    assert waited >= HOLD_SECONDS / 2  # it did wait for the other writer
    assert ticks >= 10  # and the loop went on meanwhile
    inbox = local_store.read_inbox(KEY)
    assert [entry.event_id for entry in inbox] == ["E1"]


def test_a_write_that_finds_another_thread_writing_would_wait(
    local_store: LocalStore,
) -> None:
    """This process's own writers queue on one lock: a call that may not wait does not
    join the queue, and leaves nothing behind."""
    inside, leave = threading.Event(), threading.Event()

    def write() -> None:
        with local_store.database.write():
            inside.set()
            leave.wait(10)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert inside.wait(10)
        with pytest.raises(WouldWait):
            local_store.run_here(
                functools.partial(local_store.keep, KEY, "E1", '{"text":"hi"}', owner="w")
            )
    finally:
        leave.set()
        writer.join(10)
    assert local_store.get(KEY) is None
    kept = local_store.run_here(
        functools.partial(local_store.keep, KEY, "E1", '{"text":"hi"}', owner="w")
    )
    assert kept.kept


def hold_write_lock(store: LocalStore, seconds: float) -> subprocess.Popen[str]:
    """Another process takes sqlite's write lock and holds it for `seconds`."""
    script = (
        "import sqlite3, sys, time\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('BEGIN IMMEDIATE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
        "db.execute('COMMIT')\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(store.db_path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder
