"""A busy thread's queued messages on aws, in rows of their own beside the record (which
holds the first few): read and counted; entries an earlier, expired generation left
behind are not seen."""

from __future__ import annotations

from typing import TYPE_CHECKING

from storage.aws.expressions import s
from storage.aws.layout import (
    INBOX_PREFIX,
    conv_pk,
    from_ms,
)
from storage.aws.tables import Tables
from storage.models import (
    ConversationKey,
    InboxEntry,
    inbox_stamp,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import QueryInputTypeDef


def generation_cutoff(t: Tables, generation: int | None) -> int:
    """Entries older than this (ms) were left behind by an earlier, expired record:
    every message of that record arrived at least a TTL before it expired and this
    generation began. (A message kept a moment before the record's creation by another
    replica is this generation's.)"""
    return generation - int(t.policies.state_ttl.total_seconds() * 1000) // 2 if generation else 0


def row_entries(
    t: Tables, key: ConversationKey, cutoff_ms: int, limit: int | None
) -> list[InboxEntry]:
    query = _rows_query(t, key, cutoff_ms)
    if limit is not None:
        query["Limit"] = max(limit, 1)
    entries: list[InboxEntry] = []
    paginator = t.dynamodb.get_paginator("query")
    for page in paginator.paginate(**query):  # type: ignore[misc]
        entries += [InboxEntry.model_validate_json(i["entry"]["S"]) for i in page["Items"]]
        if limit is not None and len(entries) >= limit:
            break
    return entries


def row_count(t: Tables, key: ConversationKey, cutoff_ms: int) -> int:
    """How many messages live in rows of their own (counted, not read: the server still
    reads them, 1 MB a page, but nothing is sent back)."""
    paginator = t.dynamodb.get_paginator("query")
    pages = paginator.paginate(**_rows_query(t, key, cutoff_ms), Select="COUNT")  # type: ignore[misc]
    return sum(int(page["Count"]) for page in pages)


def _rows_query(t: Tables, key: ConversationKey, cutoff_ms: int) -> QueryInputTypeDef:
    start = INBOX_PREFIX + (inbox_stamp(from_ms(str(cutoff_ms))) if cutoff_ms else "")
    return {
        "TableName": t.table,
        "KeyConditionExpression": "pk = :pk AND sk BETWEEN :start AND :end",
        "ExpressionAttributeValues": {
            ":pk": s(conv_pk(key)),
            ":start": s(start),
            ":end": s(INBOX_PREFIX + "~"),
        },
        "ConsistentRead": True,
    }
