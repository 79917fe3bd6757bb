"""The storage contract, run against both backends."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import pytest

from storage import (
    CheckpointConflict,
    CheckpointMeta,
    ConversationKey,
    LeaseBusy,
    LeaseLost,
    Status,
    StorageError,
    Store,
    ToolCallRecord,
    ToolCallStatus,
)
from testkit.runtime import record_of
from tests.conftest import Backend
from tests.storage.conftest import KEY

META = CheckpointMeta(schema_version="1.21", agent_fingerprint="fp-1")


def test_acquire_creates_the_record_and_fences_grow(store: Store) -> None:
    assert store.get(KEY) is None
    lease, record = store.acquire(KEY, "worker-a", status=Status.RUNNING)
    assert (record.fence, record.status, record.lease_owner) == (1, Status.RUNNING, "worker-a")
    store.release(lease, status=Status.IDLE)
    second, record = store.acquire(KEY, "worker-b")
    assert second.fence == 2
    assert record.status is Status.IDLE
    assert record_of(store, KEY).lease_owner == "worker-b"


def test_a_held_lease_is_busy_until_expiry_plus_skew(backend: Backend) -> None:
    store = backend.open(lease_seconds=1, lease_skew_seconds=1.5)
    taken = time.monotonic()
    store.acquire(KEY, "a")
    with pytest.raises(LeaseBusy) as busy:
        store.acquire(KEY, "b")
    assert busy.value.owner == "a"
    # Expired, but well inside the skew margin (a loaded machine's slow calls included).
    time.sleep(max(taken + 1.3 - time.monotonic(), 0))
    with pytest.raises(LeaseBusy):
        store.acquire(KEY, "b")
    time.sleep(max(taken + 2.6 - time.monotonic(), 0))
    lease, _ = store.acquire(KEY, "b")
    assert lease.fence == 2


def test_every_write_of_a_superseded_holder_is_rejected(backend: Backend) -> None:
    store = backend.open(lease_seconds=0.3, lease_skew_seconds=0)
    old, _ = store.acquire(KEY, "old")
    time.sleep(0.4)
    new, _ = store.acquire(KEY, "new")
    attempts: list[Callable[[], object]] = [
        lambda: store.renew(old),
        lambda: store.release(old),
        lambda: store.set_status(old, Status.IDLE),
        lambda: store.append_items(KEY, ['{"role":"user","content":"x"}'], old),
        lambda: store.commit(old, state={"a": 1}, meta=META, expected_version=0),
        lambda: store.begin_tool_call(old, "call-1", "send", "{}"),
        lambda: store.pop_item(KEY, old),
        lambda: store.clear_items(KEY, old),
    ]
    for attempt in attempts:
        with pytest.raises(LeaseLost):
            attempt()
    record = store.get(KEY)
    assert record is not None
    assert (record.lease_owner, record.fence, record.checkpoint, record.next_seq) == (
        "new",
        new.fence,
        None,
        0,
    )
    assert store.get_tool_call(KEY, "call-1") is None


def test_renew_extends_and_release_frees(store: Store) -> None:
    lease, _ = store.acquire(KEY, "a")
    renewed = store.renew(lease)
    assert renewed.expires_at >= lease.expires_at
    assert renewed.fence == lease.fence
    store.release(renewed, status=Status.AWAITING_APPROVAL)
    record = store.get(KEY)
    assert record is not None
    assert record.lease_owner is None
    assert record.status is Status.AWAITING_APPROVAL
    with pytest.raises(LeaseLost):
        store.renew(renewed)


def test_a_working_renewal_keeps_the_state_alive_and_an_idle_one_does_not(
    backend: Backend,
) -> None:
    """A run that commits only now and then outlasted a short `BOT_STATE_TTL`: its state
    expired under the holder, whose next commit failed, and the messages kept meanwhile were
    never answered nor told of (chaos seed 425208, aws). A renewal made while the run works
    moves the state's expiry (not its last activity); one made while the holder only waits
    does not; and an expired state is not brought back by a renewal."""
    store = backend.open(lease_seconds=600, state_ttl=timedelta(seconds=2))
    lease, record = store.acquire(KEY, "a", status=Status.RUNNING)
    for _ in range(4):  # 4 s of work, twice the TTL
        time.sleep(1)
        lease = store.renew(lease, working=True)
    alive = store.get(KEY)
    assert alive is not None and alive.last_activity_at == record.last_activity_at
    store.commit(lease, state={"a": 1}, meta=META, expected_version=0)  # the state lives

    idle_key = ConversationKey(team="T1", channel="C9", thread_ts="9.0")
    idle, _ = store.acquire(idle_key, "a", status=Status.RUNNING)
    time.sleep(3.5)
    store.renew(idle)  # waiting is not activity: the state expires as it would unheld
    assert store.get(idle_key) is None
    with pytest.raises(LeaseLost):  # gone: a late working renewal does not revive it
        store.renew(idle, working=True)
    assert store.get(idle_key) is None


def test_commit_checkpoint_with_session_items_atomically(store: Store) -> None:
    lease, _ = store.acquire(KEY, "a")
    state = {"$schemaVersion": "1.21", "text": "héllo ✓", "n": None}
    done = store.commit(
        lease,
        state=state,
        meta=META,
        expected_version=0,
        items=['{"a":1}', '{"b":2}'],
        base_seq=0,
        status=Status.AWAITING_APPROVAL,
    )
    assert done.next_seq == 2
    assert done.checkpoint is not None and done.checkpoint.session_seq == 2
    record = store.get(KEY)
    assert record is not None
    assert record.checkpoint == done.checkpoint
    assert record.status is Status.AWAITING_APPROVAL
    assert store.load_checkpoint(record.checkpoint) == state
    assert store.read_items(KEY).items == ['{"a":1}', '{"b":2}']


def test_commit_expecting_a_stale_version_conflicts_and_changes_nothing(store: Store) -> None:
    lease, _ = store.acquire(KEY, "a")
    store.commit(lease, state={"v": 1}, meta=META, expected_version=0)
    with pytest.raises(CheckpointConflict) as conflict:
        store.commit(lease, state={"v": 2}, meta=META, expected_version=0, items=['"x"'])
    assert conflict.value.actual == 1
    record = store.get(KEY)
    assert record is not None and record.checkpoint is not None
    assert store.load_checkpoint(record.checkpoint) == {"v": 1}
    assert store.read_items(KEY).items == []


def test_drop_checkpoint_removes_pointer_and_blob(store: Store) -> None:
    lease, _ = store.acquire(KEY, "a")
    done = store.commit(lease, state={"v": 1}, meta=META, expected_version=0, items=['"x"'])
    removed = store.drop_checkpoint(lease, status=Status.DISCARDED, release=True)
    assert removed is not None and removed == done.checkpoint
    record = store.get(KEY)
    assert record is not None
    assert (record.checkpoint, record.status, record.lease_owner) == (None, Status.DISCARDED, None)
    assert store.read_items(KEY).items == ['"x"']  # history is kept
    from storage import CheckpointMissing

    with pytest.raises(CheckpointMissing):
        store.load_checkpoint(removed)


def test_event_ids_are_claimed_once(store: Store) -> None:
    assert store.claim_event("Ev1") is True
    # Claims are per conversation (event ids name one thread's message anyway).
    other = ConversationKey(team=KEY.team, channel=KEY.channel, thread_ts="1700000999.000001")
    assert store.enqueue(other, "Ev1", '{"text":"elsewhere"}') is True
    assert store.claim_event("Ev2") is True
    # Looking claims nothing: a claim is seen, an event never claimed stays unclaimed.
    assert (store.event_claimed("Ev2"), store.event_claimed("Ev3")) == (True, False)
    assert store.claim_event("Ev3") is True


def test_tool_calls_are_recorded_once_and_completed(store: Store) -> None:
    lease, _ = store.acquire(KEY, "a")
    first = store.begin_tool_call(lease, "call-1", "send_email", '{"to":"x"}')
    again = store.begin_tool_call(lease, "call-1", "send_email", '{"to":"x"}')
    assert (first.created, again.created) == (True, False)
    assert again.record.status == "started"
    big_output = "résultat " * 50_000  # over DynamoDB's 400 KB item limit
    store.complete_tool_call(lease, "call-1", big_output)
    record = store.get_tool_call(KEY, "call-1")
    assert record is not None
    assert (record.status, record.output) == ("completed", big_output)
    # A later holder sees the completed record instead of running the tool again.
    store.release(lease)
    later, _ = store.acquire(KEY, "b")
    claim = store.begin_tool_call(later, "call-1", "send_email", '{"to":"x"}')
    assert claim.created is False and claim.record.output == big_output


def test_a_call_approved_by_a_commit_is_started_by_its_claim_once(backend: Backend) -> None:
    """A commit records the calls it approves as `approved`; the claim just before a call
    runs makes it `started` (once: a second claim finds it started), fenced by the lease,
    so a holder whose lease was taken cannot start it; an approved call may be cancelled
    (a stop before it started), never completed, and a cancelled one is not started."""
    store = backend.open(lease_seconds=30)
    old, _ = store.acquire(KEY, "old", status=Status.RUNNING)
    approved = [
        ToolCallRecord(
            key=KEY,
            call_id=call_id,
            tool_name="send_email",
            arguments='{"to":"x"}',
            status=ToolCallStatus.APPROVED,
            fence=old.fence,
            started_at=store.clock(),
        )
        for call_id in ("c1", "c2", "c3")
    ]
    done = store.commit(old, state={"v": 1}, meta=META, expected_version=0, arm=approved)
    assert done.armed == ("c1", "c2", "c3")
    assert ledger(store, "c1", "c2", "c3") == ["approved"] * 3
    with pytest.raises(StorageError):  # not started: nothing ran to have a result
        store.complete_tool_call(old, "c1", "sent")
    first = store.begin_tool_call(old, "c1", "send_email", '{"to":"x"}')
    again = store.begin_tool_call(old, "c1", "send_email", '{"to":"x"}')
    assert (first.created, first.record.status) == (True, "started")
    assert (again.created, again.record.status) == (False, "started")
    assert store.complete_tool_call(old, "c1", "sent")
    assert store.complete_tool_call(old, "c2", "stopped", status=ToolCallStatus.CANCELLED)
    cancelled = store.begin_tool_call(old, "c2", "send_email", '{"to":"x"}')
    assert (cancelled.created, cancelled.record.status) == (False, "cancelled")
    # A new holder (a restart): the old one can neither start nor cancel c3 any more.
    new, _ = store.acquire(KEY, "new", force=True)
    with pytest.raises(LeaseLost):
        store.begin_tool_call(old, "c3", "send_email", '{"to":"x"}')
    with pytest.raises(LeaseLost):
        store.complete_tool_call(old, "c3", "stopped", status=ToolCallStatus.CANCELLED)
    claim = store.begin_tool_call(new, "c3", "send_email", '{"to":"x"}')
    assert (claim.created, claim.record.status, claim.record.fence) == (True, "started", new.fence)
    # A commit that approves a call the ledger holds already leaves it as it is.
    redo = store.commit(new, state={"v": 2}, meta=META, expected_version=1, arm=approved)
    assert redo.armed == ()
    assert ledger(store, "c1", "c2", "c3") == ["completed", "cancelled", "started"]


def ledger(store: Store, *call_ids: str) -> list[str | None]:
    """What the tool ledger says of each call (None: nothing)."""
    return [
        None if (record := store.get_tool_call(KEY, call_id)) is None else record.status
        for call_id in call_ids
    ]


def test_status_index_lists_paused_conversations_and_counts(store: Store) -> None:
    keys = [ConversationKey(team="T1", channel="C9", thread_ts=f"17000000{i}.0") for i in range(5)]
    for i, key in enumerate(keys):
        lease, _ = store.acquire(key, "w", status=Status.RUNNING)
        status = Status.AWAITING_APPROVAL if i % 2 == 0 else Status.IDLE
        store.release(lease, status=status)
        time.sleep(0.02)
    counts = store.count_by_status()
    assert counts[Status.AWAITING_APPROVAL] == 3
    assert counts[Status.IDLE] == 2
    assert counts[Status.RUNNING] == 0
    paused = store.list_by_status(Status.AWAITING_APPROVAL)
    assert [c.key for c in paused] == [keys[0], keys[2], keys[4]]  # least recently active first
    assert store.list_by_status(Status.AWAITING_APPROVAL, idle_for=timedelta(hours=1)) == []
    time.sleep(0.3)
    assert len(store.list_by_status(Status.AWAITING_APPROVAL, idle_for=timedelta(seconds=0.2))) == 3
    assert len(store.list_by_status(Status.AWAITING_APPROVAL, limit=2)) == 2
    assert store.list_by_status(Status.IDLE) == []  # idle conversations are not indexed


def test_inbox_keeps_messages_until_a_commit_consumes_them(store: Store) -> None:
    from storage import InboxChanged

    assert store.enqueue(KEY, "Ev1", '{"text":"first"}') is True
    assert store.enqueue(KEY, "Ev1", '{"text":"first again"}') is False  # a retried delivery
    # Claims are per conversation (event ids name one thread's message anyway).
    other = ConversationKey(team=KEY.team, channel=KEY.channel, thread_ts="1700000999.000001")
    assert store.enqueue(other, "Ev1", '{"text":"elsewhere"}') is True
    record = store.get(KEY)
    assert record is not None and (record.status, record.inbox_seq) == (Status.RUNNING, 1)
    lease, record = store.acquire(KEY, "w")
    seen = record.inbox_seq
    entries = store.read_inbox(KEY)
    assert [e.payload for e in entries] == ['{"text":"first"}']
    assert store.enqueue(KEY, "Ev2", '{"text":"second"}') is True  # arrives mid-turn
    store.commit(
        lease,
        state={"v": 1},
        meta=META,
        expected_version=0,
        items=['"turn"'],
        consume=[entries[0].entry_id],
    )
    with pytest.raises(InboxChanged):
        store.release(lease, status=Status.IDLE, inbox_seen=seen)
    assert record_of(store, KEY).lease_owner == "w"  # still held
    remaining = store.read_inbox(KEY)
    assert [e.event_id for e in remaining] == ["Ev2"]
    store.commit(
        lease, state={"v": 2}, meta=META, expected_version=1, consume=[remaining[0].entry_id]
    )
    store.release(lease, status=Status.IDLE, inbox_seen=seen + 1)
    assert store.read_inbox(KEY) == []
    assert record_of(store, KEY).status is Status.IDLE


def test_two_writers_racing_on_one_version_one_wins(backend: Backend) -> None:
    """Two processes' worth of stores commit concurrently, both expecting version 0."""
    from concurrent.futures import ThreadPoolExecutor

    first = backend.open(lease_seconds=30)
    second = backend.open(lease_seconds=30)
    lease, _ = first.acquire(KEY, "writer")

    def attempt(store: Store, n: int) -> str:
        try:
            store.commit(
                lease, state={"writer": n}, meta=META, expected_version=0, items=[f'"{n}"']
            )
        except CheckpointConflict:
            return "conflict"
        except Exception as exc:  # a SessionConflict is also a refusal
            return type(exc).__name__
        return "won"

    for _ in range(5):
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(attempt, (first, second), (1, 2)))
        assert sorted(results)[-1] == "won" and results.count("won") == 1, results
        record = first.get(KEY)
        assert record is not None and record.checkpoint is not None
        winner = first.load_checkpoint(record.checkpoint)["writer"]
        assert first.read_items(KEY).items == [f'"{winner}"']
        # reset for the next round
        first.drop_checkpoint(lease, status=Status.IDLE)
        first.clear_items(KEY, lease)
