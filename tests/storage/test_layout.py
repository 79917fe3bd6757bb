"""The DynamoDB single-table layout (`storage.aws.layout`): row keys with and without a
generation, and conversation records read back from items."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from storage import Conversation, ConversationKey, Status
from storage.aws.expressions import Item, n, s
from storage.aws.layout import (
    conv_pk,
    epoch_seconds,
    expired,
    in_generation,
    item_prefix,
    item_sk,
    meta_key,
    ms,
    record_from_item,
    row,
    seq_of,
    tool_sk,
)
from testkit.pointers import checkpoint_pointer

KEY = ConversationKey(team="T1", channel="C1", thread_ts="1700000000.000100")
GENERATION = 1_700_000_000_123
NOW = datetime(2025, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)


def test_conversation_keys() -> None:
    assert conv_pk(KEY) == "CONV#T1:C1:1700000000.000100"
    assert meta_key(KEY) == {"pk": {"S": "CONV#T1:C1:1700000000.000100"}, "sk": {"S": "META"}}


def test_item_keys_without_a_generation_are_the_legacy_ones() -> None:
    assert item_prefix(0) == "ITEM#"
    assert item_sk(0, 42) == "ITEM#000000000042"
    assert tool_sk(0, "call-1") == "TOOL#call-1"
    assert seq_of(item_sk(0, 42)) == 42


def test_item_keys_with_a_generation() -> None:
    assert item_sk(GENERATION, 42) == "ITEM#g1700000000123#000000000042"
    assert item_sk(5, 1) == "ITEM#g0000000000005#000000000001"  # fixed width
    assert tool_sk(GENERATION, "call-1") == "TOOL#g1700000000123#call-1"
    assert seq_of(item_sk(GENERATION, 42)) == 42
    assert sorted(item_sk(GENERATION, i) for i in (10, 9, 100)) == [
        item_sk(GENERATION, i) for i in (9, 10, 100)
    ]


def test_in_generation_tells_the_rows_of_each_generation_apart() -> None:
    legacy, current, older = item_sk(0, 1), item_sk(GENERATION, 1), item_sk(GENERATION - 1, 1)
    assert in_generation(legacy, 0) and not in_generation(legacy, GENERATION)
    assert in_generation(current, GENERATION)
    assert not in_generation(current, 0) and not in_generation(older, GENERATION)
    assert not in_generation("TOOL#call-1", 0) and not in_generation("META", 0)


def at_ms(moment: datetime) -> datetime:
    return datetime.fromtimestamp(ms(moment) / 1000, tz=UTC)


def at_s(moment: datetime) -> datetime:
    return datetime.fromtimestamp(epoch_seconds(moment), tz=UTC)


def full_item(record: Conversation) -> Item:
    """The META item the store writes for `record`, every attribute present."""
    assert record.lease_expires_at and record.delivery_retry_at and record.checkpoint
    assert record.delivered_count is not None and record.delivery_error is not None
    return {
        **meta_key(record.key),
        "conv_key": s(str(record.key)),
        "conv_status": s(record.status.value),
        "lease_owner": s(record.lease_owner or ""),
        "lease_expires_ms": n(ms(record.lease_expires_at)),
        "fence": n(record.fence),
        "checkpoint": s(record.checkpoint.model_dump_json()),
        "checkpoint_version": n(record.checkpoint.version),
        "next_seq": n(record.next_seq),
        "session_floor": n(record.session_floor),
        "generation": n(record.generation),
        "participants": {"SS": sorted(record.participants)},
        "inbox_seq": n(record.inbox_seq),
        "delivered_version": n(record.delivered_version),
        "delivered_count": n(record.delivered_count),
        "delivery_attempts": n(record.delivery_attempts),
        "delivery_retry_ms": n(ms(record.delivery_retry_at)),
        "delivery_error": s(record.delivery_error),
        "created_ms": n(ms(record.created_at)),
        "updated_ms": n(ms(record.updated_at)),
        "last_activity_ms": n(ms(record.last_activity_at)),
        "expires_at": n(epoch_seconds(record.expires_at)),
    }


def test_a_record_round_trips_through_its_item() -> None:
    pointer = checkpoint_pointer(
        "checkpoints/T1/C1/1700000000.000100/v3.json.gz",
        3,
        size=120,
        created_at=NOW,
        fence=2,
        session_seq=7,
    )
    record = Conversation(
        key=KEY,
        status=Status.AWAITING_APPROVAL,
        lease_owner="host|boot|1|2|abcd",
        lease_expires_at=at_ms(NOW + timedelta(seconds=30)),
        fence=2,
        checkpoint=pointer,
        next_seq=7,
        session_floor=1,
        generation=GENERATION,
        participants=frozenset({"U1", "U2"}),
        inbox_seq=4,
        delivered_version=3,
        delivered_count=1,
        delivery_attempts=2,
        delivery_retry_at=at_ms(NOW + timedelta(seconds=10)),
        delivery_error="ratelimited",
        created_at=at_ms(NOW - timedelta(days=1)),
        updated_at=at_ms(NOW),
        last_activity_at=at_ms(NOW),
        expires_at=at_s(NOW + timedelta(days=7)),
    )
    assert record_from_item(full_item(record)) == record


def test_a_minimal_item_reads_as_defaults() -> None:
    item: Item = {
        **meta_key(KEY),
        "conv_key": s(str(KEY)),
        "conv_status": s("idle"),
        "created_ms": n(ms(NOW)),
        "updated_ms": n(ms(NOW)),
        "last_activity_ms": n(ms(NOW)),
        "expires_at": n(epoch_seconds(NOW)),
    }
    record = record_from_item(item)
    assert (record.key, record.status) == (KEY, Status.IDLE)
    assert (record.lease_owner, record.lease_expires_at, record.checkpoint) == (None, None, None)
    assert (record.fence, record.next_seq, record.generation, record.inbox_seq) == (0, 0, 0, 0)
    assert record.participants == frozenset()
    assert (record.delivered_count, record.delivery_retry_at, record.delivery_error) == (
        None,
        None,
        None,
    )
    assert record.created_at == at_ms(NOW)


def test_expired_and_rows() -> None:
    assert not expired({"expires_at": n(epoch_seconds(NOW))}, NOW)
    assert expired({"expires_at": n(epoch_seconds(NOW) - 1)}, NOW)
    assert not expired({}, NOW)  # no TTL attribute: never expires
    assert row(KEY, "ITEM#000000000001", {"body": s("x")}, NOW) == {
        "pk": s(conv_pk(KEY)),
        "sk": s("ITEM#000000000001"),
        "body": s("x"),
        "expires_at": n(epoch_seconds(NOW)),
    }
