"""Storage records (`storage.models`): keys, the delivery cursor, leases, inbox stamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from storage import Conversation, ConversationKey
from storage.models import inbox_stamp, stamp_ms
from testkit.pointers import checkpoint_pointer

KEY = ConversationKey(team="T1", channel="C1", thread_ts="1700000000.000100")
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def conversation(version: int | None = None, **fields: object) -> Conversation:
    pointer = checkpoint_pointer("checkpoints/x", version, created_at=NOW) if version else None
    return Conversation.model_validate(
        {
            "key": KEY,
            "checkpoint": pointer,
            "created_at": NOW,
            "updated_at": NOW,
            "last_activity_at": NOW,
            "expires_at": NOW + timedelta(days=7),
            **fields,
        }
    )


def test_a_key_is_text_and_back() -> None:
    assert str(KEY) == "T1:C1:1700000000.000100"
    assert ConversationKey.parse(str(KEY)) == KEY
    assert KEY.path == "T1/C1/1700000000.000100"


def test_a_key_with_an_enterprise_has_four_parts_and_one_without_keeps_three() -> None:
    grid = ConversationKey(enterprise="E1", team="T1", channel="C1", thread_ts="1700000000.0001")
    assert str(grid) == "E1:T1:C1:1700000000.0001"
    assert grid.path == "E1/T1/C1/1700000000.0001"
    assert ConversationKey.parse(str(grid)) == grid
    # Keys written before enterprises existed read back unchanged, with no enterprise.
    old = ConversationKey.parse("T1:C1:1700000000.000100")
    assert old == KEY and old.enterprise is None and str(old) == "T1:C1:1700000000.000100"
    assert grid != KEY.model_copy(update={"enterprise": "E1"})  # the ts differs
    assert (
        ConversationKey.model_validate_json(
            '{"team":"T1","channel":"C1","thread_ts":"1700000000.000100"}'
        )
        == KEY
    )  # a record saved before


@pytest.mark.parametrize(
    "text", ["T1:C1", "E1:T1:C1:1.0:x", "E:1:T1:C1:1.0", "E/1:T1:C1:1.0", ":T1:C1:1.0", ""]
)
def test_a_key_parses_three_or_four_parts_only(text: str) -> None:
    with pytest.raises(ValueError):
        ConversationKey.parse(text)


@pytest.mark.parametrize(
    ("team", "channel", "thread_ts"),
    [("T:1", "C1", "1.0"), ("T1", "C/..", "1.0"), ("T1", "C1", "1.0a"), ("", "C1", "1.0")],
)
def test_a_key_refuses_ids_that_could_not_be_slacks(
    team: str, channel: str, thread_ts: str
) -> None:
    with pytest.raises(ValidationError):
        ConversationKey(team=team, channel=channel, thread_ts=thread_ts)


def test_undelivered_from_follows_the_delivery_cursor() -> None:
    assert conversation().undelivered_from() is None  # no checkpoint, nothing owed
    assert conversation(3, delivered_version=2).undelivered_from() == 0  # a newer outbox
    assert conversation(3, delivered_version=3, delivered_count=2).undelivered_from() == 2
    assert conversation(3, delivered_version=3, delivered_count=None).undelivered_from() is None
    assert conversation(3, delivered_version=4, delivered_count=1).undelivered_from() is None
    assert conversation(3).checkpoint_version == 3 and conversation().checkpoint_version == 0


def test_leased_until_the_lease_expires() -> None:
    assert not conversation().leased(NOW)
    held = conversation(lease_owner="w", lease_expires_at=NOW)
    assert held.leased(NOW) and not held.leased(NOW + timedelta(microseconds=1))
    assert conversation(lease_owner="w").leased(NOW)  # no expiry recorded: held


def test_inbox_stamps_sort_in_arrival_order_and_give_back_the_time() -> None:
    stamps = [inbox_stamp(NOW + timedelta(microseconds=us)) for us in (0, 1, 999, 10**6)]
    assert all(len(stamp) == 18 and stamp.isdigit() for stamp in stamps)
    assert sorted(stamps) == stamps and len(set(stamps)) == 4
    entry_id = f"{inbox_stamp(NOW)}#Ev1"
    assert stamp_ms(entry_id) == int(NOW.timestamp() * 1000)
    assert stamp_ms("001740830400000#Ev1") == 1_740_830_400_000  # an older, ms-based id
