"""Records whose state expired, on aws: deleted once past their TTL (what DynamoDB's TTL
would do, late), and replaced by the record that brings the thread back (`Store.revived`),
naming the messages that were never answered."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from storage.aws.errors import landed
from storage.aws.expressions import Item, n, s, ss
from storage.aws.inbox import generation_cutoff, row_count, row_entries
from storage.aws.layout import (
    CLAIM_SETS,
    LEGACY_CLAIM,
    REFUSED_ATTRIBUTE,
    STATE_EXPIRES,
    epoch_seconds,
    inline_entries,
    meta_key,
    ms,
    record_from_item,
)
from storage.aws.tables import Tables
from storage.models import (
    ConversationKey,
    Status,
    stamp_ms,
)
from storage.writes import DROPPED_KEPT


def forget_expired(t: Tables, key: ConversationKey, old: Item) -> bool:
    """Delete a record past its TTL (what DynamoDB's TTL would do, late), so that it can be
    created again as a new generation. False if it changed meanwhile."""
    return _if_unchanged(t.dynamodb.delete_item, old, TableName=t.table, Key=meta_key(key))


def revive(t: Tables, key: ConversationKey, old: Item, now: datetime) -> bool:
    """Replace a record whose state expired by the one that brings its thread back (see
    `Store.revived`); False when it changed meanwhile (someone else brought it back)."""
    record = record_from_item(old)
    entries, in_rows = inline_entries(old)
    cutoff = generation_cutoff(t, record.generation)
    entries = [e for e in entries if not cutoff or stamp_ms(e.entry_id) >= cutoff]
    queued = len(entries)
    if in_rows:  # a busy thread's later messages: named like those in the record
        queued += row_count(t, key, cutoff)
        rows = row_entries(t, key, cutoff, DROPPED_KEPT)
        entries = sorted(entries + rows, key=lambda e: e.entry_id)
    dropped = [entry.payload for entry in entries][:DROPPED_KEPT]
    fresh = t.policies.revived(record, now, dropped, queued)
    item: Item = {
        **meta_key(key),
        "conv_key": s(str(key)),
        "conv_status": s(Status.IDLE.value),
        "fence": n(fresh.fence),
        "next_seq": n(0),
        "session_floor": n(0),
        "inbox_seq": n(fresh.inbox_seq),
        "checkpoint_version": n(0),
        "generation": n(fresh.generation),
        "created_ms": n(ms(now)),
        "updated_ms": n(ms(now)),
        "last_activity_ms": n(ms(now)),
        STATE_EXPIRES: n(epoch_seconds(t.policies.expiry(now))),
        "expires_at": n(epoch_seconds(t.policies.record_ttl(now))),
        "expired_from": s(fresh.expired_from.model_dump_json() if fresh.expired_from else ""),
    }
    if fresh.participants:
        item["participants"] = ss(sorted(fresh.participants))
    # Event claims outlive the state they came with (a delivery of a message kept just
    # before the expiry is still a duplicate): the record's sets, and `spill_until`,
    # which sends keeps to rows while claims may live in CLAIM# rows.
    for name, value in old.items():
        if name in CLAIM_SETS or name.startswith(LEGACY_CLAIM) or name == "spill_until":
            item[name] = value
        # Messages refused at the cap that the thread was not told of: it still is.
        if name.startswith(REFUSED_ATTRIBUTE) or name == "refused_more":
            item[name] = value
    return _if_unchanged(t.dynamodb.put_item, old, TableName=t.table, Item=item)


def _if_unchanged(write: Callable[..., object], old: Item, **request: Any) -> bool:
    """`write` the record only if it is still the one read (`old`, by its expiry); False
    when it changed meanwhile."""
    return landed(
        lambda: write(
            **request,
            ConditionExpression="#expires_at = :old",
            ExpressionAttributeNames={"#expires_at": "expires_at"},
            ExpressionAttributeValues={":old": old["expires_at"]},
        )
    )
