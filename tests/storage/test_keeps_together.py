"""Urgent calls made together (`Store.run_together`, gathered by the bridge over one pass of
the event loop): a burst's keeps share one write transaction and one fsync, each call in a
savepoint of it, so that one that fails is undone alone and the others land; when another
writer holds the lock, none is made on the loop and each waits on a worker thread. Every
outcome is given only after the commit."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

import pytest

from storage import ConversationKey, StorageCalls
from storage.errors import NotFound, WouldWait
from storage.local import LocalStore
from storage.writes import KeepResult
from tests.storage.test_run_here import counting_calls, hold_write_lock

HOLD_SECONDS = 0.5


def key(n: int) -> ConversationKey:
    return ConversationKey(team="T1", channel="C1", thread_ts=f"1700{n:06d}.000100")


def keep(
    store: LocalStore, n: int, event_id: str, *, create: bool = True
) -> functools.partial[KeepResult]:
    return functools.partial(
        store.keep, key(n), event_id, '{"text":"hi"}', owner="w", create=create
    )


def kept(outcome: KeepResult | Exception) -> bool:
    assert isinstance(outcome, KeepResult), outcome
    return outcome.kept


def test_calls_made_together_share_one_commit(local_store: LocalStore) -> None:
    """Five keeps and a second delivery of the first: one commit; the later calls see the
    earlier ones' writes (the duplicate is one), and all of them are there afterwards."""
    before = local_store.database.commits_here
    calls = [keep(local_store, n, f"E{n}") for n in range(5)] + [keep(local_store, 0, "E0")]
    outcomes = local_store.run_together(calls)
    assert local_store.database.commits_here == before + 1
    assert [kept(o) for o in outcomes] == [True] * 5 + [False]
    for n in range(5):
        assert [e.event_id for e in local_store.read_inbox(key(n))] == [f"E{n}"]


def test_a_call_that_fails_is_undone_alone(local_store: LocalStore) -> None:
    """A write that raises inside the group leaves nothing; the others land."""
    database = local_store.database
    with database.together():
        local_store.keep(key(1), "E1", '{"text":"hi"}', owner="w")
        with pytest.raises(RuntimeError), database.write() as db:
            db.execute("INSERT INTO replicas (replica, beat_at) VALUES ('r1', 1.0)")
            raise RuntimeError("the call's own failure")
        local_store.keep(key(2), "E2", '{"text":"hi"}', owner="w")
    assert database.connection().execute("SELECT count(*) FROM replicas").fetchone() == (0,)
    assert len(local_store.read_inbox(key(1))) == len(local_store.read_inbox(key(2))) == 1


def test_each_caller_gets_its_own_outcome(local_store: LocalStore) -> None:
    outcomes = local_store.run_together(
        [keep(local_store, 1, "E1"), keep(local_store, 2, "E2", create=False)]
    )
    assert kept(outcomes[0])
    assert isinstance(outcomes[1], NotFound)
    assert local_store.get(key(2)) is None


def test_only_the_stores_quick_calls_are_made_together(local_store: LocalStore) -> None:
    with pytest.raises(WouldWait):
        calls: list[Callable[[], KeepResult]] = [
            keep(local_store, 1, "E1"),
            lambda: KeepResult(kept=True),  # not the store's
        ]
        local_store.run_together(calls)
    assert local_store.get(key(1)) is None


def test_another_processs_writer_makes_none_of_them_here(local_store: LocalStore) -> None:
    holder = hold_write_lock(local_store, HOLD_SECONDS)
    try:
        with pytest.raises(WouldWait):
            local_store.run_together([keep(local_store, n, f"E{n}") for n in range(3)])
    finally:
        assert holder.wait(10) == 0
    assert all(local_store.get(key(n)) is None for n in range(3))


async def test_the_bridge_makes_a_pass_of_urgent_keeps_in_one_write(
    local_store: LocalStore,
) -> None:
    with counting_calls(local_store) as (calls, pool):
        before = local_store.database.commits_here
        kept = await asyncio.gather(
            *(calls.urgent(local_store.keep, key(n), f"E{n}", "{}", owner="w") for n in range(20))
        )
        assert local_store.database.commits_here == before + 1
        assert pool.names == []
    assert all(k.kept for k in kept)
    assert sum(len(local_store.read_inbox(key(n))) for n in range(20)) == 20


async def test_the_bridge_hands_a_group_it_cannot_make_to_worker_threads(
    local_store: LocalStore,
) -> None:
    """Another process holds the write lock: each keep waits for it on a worker thread,
    and each lands once."""
    holder = hold_write_lock(local_store, HOLD_SECONDS)
    with counting_calls(local_store) as (calls, pool):
        kept = await asyncio.gather(
            *(calls.urgent(local_store.keep, key(n), f"E{n}", "{}", owner="w") for n in range(5))
        )
    assert holder.wait(10) == 0
    assert all(k.kept for k in kept) and pool.names == ["keep"] * 5
    assert [len(local_store.read_inbox(key(n))) for n in range(5)] == [1] * 5


async def test_the_bridge_makes_no_group_larger_than_its_limit(
    local_store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("storage.calls.GROUP_LIMIT", 4)
    sizes: list[int] = []
    run_together = local_store.run_together

    def sized(calls: list[functools.partial[KeepResult]]) -> list[KeepResult | Exception]:
        sizes.append(len(calls))
        return run_together(calls)

    monkeypatch.setattr(local_store, "run_together", sized)
    calls = StorageCalls(local_store)
    try:
        kept = await asyncio.gather(
            *(calls.urgent(local_store.keep, key(n), f"E{n}", "{}", owner="w") for n in range(10))
        )
    finally:
        calls.close()
    assert all(k.kept for k in kept)
    assert sizes == [4, 4, 2]
