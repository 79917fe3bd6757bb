"""The storage contract's summaries (`Commit.summary`, `Store.read_summary`), on both
backends: stored by the checkpoint commit that carries one, atomically with it, replacing
the one before; named by the record; never stored by a commit that fails."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from storage import (
    CheckpointConflict,
    CheckpointMeta,
    Committed,
    Lease,
    LeaseLost,
    Status,
    Store,
    Summary,
    ToolCallRecord,
    ToolCallStatus,
)
from storage.aws import AwsStore, create_resources
from storage.aws.summaries import summary_sk
from storage.local import LocalStore
from testkit.runtime import record_of
from tests.storage.conftest import KEY

META = CheckpointMeta(schema_version="1.21", agent_fingerprint="fp-1")


def items(count: int, tag: str = "m") -> list[str]:
    return [f'{{"role":"user","content":"{tag}{i}"}}' for i in range(count)]


def first_turn(store: Store, lease: Lease, count: int, **more: Any) -> Committed:
    """The conversation's first commit: `count` items (and what `more` adds)."""
    return store.commit(
        lease, state={"v": 1}, meta=META, expected_version=0, items=items(count), **more
    )


def test_a_summary_is_stored_with_its_checkpoint_and_replaced_by_the_next(store: Store) -> None:
    lease, record = store.acquire(KEY, "w", status=Status.RUNNING)
    assert record.summary_seq == 0 and store.read_summary(record) is None
    first_turn(store, lease, 6)
    first = Summary(through=4, text="They spoke of tides.")
    store.commit(lease, state={"v": 2}, meta=META, expected_version=1, summary=first)
    record = record_of(store, KEY)
    assert record.summary_seq == 4 and record.next_seq == 6
    assert store.read_summary(record) == first

    # A commit without one keeps it; the next one, of later items, replaces it.
    store.commit(lease, state={"v": 3}, meta=META, expected_version=2, items=items(2, "n"))
    assert store.read_summary(record_of(store, KEY)) == first
    second = Summary(through=7, text="They spoke of tides, then of the moon.")
    store.commit(lease, state={"v": 4}, meta=META, expected_version=3, summary=second)
    record = record_of(store, KEY)
    assert (record.summary_seq, store.read_summary(record)) == (7, second)
    assert store.read_summary(record.model_copy(update={"summary_seq": 4})) is None


def test_a_summary_of_items_the_commit_leaves_is_accepted_with_them(store: Store) -> None:
    """One write: the items, the checkpoint and a summary of some of them (DynamoDB counts
    the summary's row among its 100 actions: a full batch of items and armed calls)."""
    lease, _ = store.acquire(KEY, "w", status=Status.RUNNING)
    armed = [
        ToolCallRecord(
            key=KEY,
            call_id=f"call_{i}",
            tool_name="t",
            arguments="{}",
            status=ToolCallStatus.STARTED,
            fence=lease.fence,
            started_at=store.clock(),
        )
        for i in range(3)
    ]
    summary = Summary(through=80, text="s" * 30_000)
    first_turn(store, lease, 95, base_seq=0, arm=armed, summary=summary)
    record = record_of(store, KEY)
    assert (record.next_seq, store.read_summary(record)) == (95, summary)
    assert store.read_items(KEY).items == items(95)
    assert store.get_tool_call(KEY, "call_2") is not None


def test_a_failed_commit_stores_no_summary(store: Store) -> None:
    lease, _ = store.acquire(KEY, "w", status=Status.RUNNING)
    first_turn(store, lease, 4)
    summary = Summary(through=3, text="never stored")
    with pytest.raises(CheckpointConflict):
        store.commit(lease, state={"v": 2}, meta=META, expected_version=0, summary=summary)
    with pytest.raises(ValueError):  # beyond the items the conversation has
        too_far = Summary(through=9, text="of items that do not exist")
        store.commit(lease, state={"v": 2}, meta=META, expected_version=1, summary=too_far)
    newer, _ = store.acquire(KEY, "other", force=True)
    with pytest.raises(LeaseLost):
        store.commit(lease, state={"v": 2}, meta=META, expected_version=1, summary=summary)
    record = record_of(store, KEY)
    assert record.summary_seq == 0 and store.read_summary(record) is None
    assert record.checkpoint_version == 1
    store.release(newer)


def test_a_cleared_history_has_no_summary(store: Store) -> None:
    lease, _ = store.acquire(KEY, "w", status=Status.RUNNING)
    first_turn(store, lease, 4, summary=Summary(through=2, text="about to go"))
    store.clear_items(KEY, lease)
    record = record_of(store, KEY)
    assert record.summary_seq == 2 and record.session_floor == 4
    assert store.read_summary(record) is None


def expire_rows(store: Store) -> None:
    """What each backend's expiry deletes by now (the store's clock): DynamoDB's TTL deletes
    every row past its `expires_at` (DynamoDB Local keeps them: the sweep is made here);
    the local store's garbage collection deletes what expired with its conversation."""
    if isinstance(store, LocalStore):
        store.collect_garbage()
        return
    assert isinstance(store, AwsStore)
    now = int(store.clock().timestamp())
    for page in store.dynamodb.get_paginator("scan").paginate(TableName=store.table):
        for row in page["Items"]:
            if int(row.get("expires_at", {}).get("N", str(1 << 62))) < now:
                key = {"pk": row["pk"], "sk": row["sk"]}
                store.dynamodb.delete_item(TableName=store.table, Key=key)


def summarized_on_a_clock(store: Store, through: int, count: int) -> tuple[list[datetime], Summary]:
    """A first turn of `count` items, committed with a summary of the first `through`, on
    a clock the test moves (`now[0]`)."""
    now = [store.clock()]
    store.clock = lambda: now[0]
    lease, _ = store.acquire(KEY, "w", status=Status.RUNNING)
    summary = Summary(through=through, text="They spoke of tides.")
    first_turn(store, lease, count, summary=summary)
    store.release(lease, status=Status.IDLE)
    return now, summary


def another_turn(store: Store, turn: int) -> None:
    """Turn `turn` (from 0) after the first: two more items, no summary."""
    lease, _ = store.acquire(KEY, "w", status=Status.RUNNING)
    store.commit(
        lease, state={"v": 2}, meta=META, expected_version=turn + 1, items=items(2, f"t{turn}")
    )
    store.release(lease, status=Status.IDLE)


def test_a_summary_lasts_as_long_as_its_conversation(store: Store) -> None:
    """A thread can go on for longer than the state's TTL behind one summary (its turns fit
    the window): the summary lasts while the conversation does, whatever expiry deletes."""
    now, summary = summarized_on_a_clock(store, through=4, count=6)
    for turn in range(8):  # a turn every 0.4 TTL: the state lives on, 3.2 TTLs in all
        now[0] += store.state_ttl * 0.4
        another_turn(store, turn)
        expire_rows(store)
        assert store.read_summary(record_of(store, KEY)) == summary, f"turn {turn}"


@pytest.fixture
def aws_store(aws_services: dict[str, str]) -> Iterator[AwsStore]:
    name = f"summaries-{uuid.uuid4().hex[:10]}"
    create_resources(name, name)
    store = AwsStore(name, name)
    yield store
    store.close()


def test_keeping_a_summary_costs_a_write_only_once_in_a_while(aws_store: AwsStore) -> None:
    """Turns an hour apart for a day: the summary's row is written when made, and its
    expiry moved once when the day has gone by, not with every turn (only the aws
    backend's summaries expire by themselves)."""
    store = aws_store
    now, summary = summarized_on_a_clock(store, through=2, count=4)

    def row_expires() -> int:
        found = store.dynamodb.get_item(
            TableName=store.table,
            Key={
                "pk": {"S": f"CONV#{KEY}"},
                "sk": {"S": summary_sk(record_of(store, KEY).generation)},
            },
        )
        return int(found["Item"]["expires_at"]["N"])

    expiries = [row_expires()]
    for turn in range(30):
        now[0] += timedelta(hours=1)
        another_turn(store, turn)
        expiries.append(row_expires())
    assert len(set(expiries)) == 2  # written, then moved on once (after a day)
    assert store.read_summary(record_of(store, KEY)) == summary
