"""One-time migration of a table written by an earlier release (`python -m bot admin migrate`).

It scans the conversation records once (a Scan is fine for a migration, never for a query)
and, for each: puts it in the sharded status index (`status_key`), counts it in the sharded
counters (`counted`), and moves messages still queued in `INBOX#` rows into the record
(first release); puts a paused one in the place index (`place_key`, releases before
`by_place`), and one awaiting approval in the approval index for its run's starter
(`waiting_ws`, releases before `by_waiting`). Idempotent: a record already migrated is left
alone. Run it with traffic drained (the place and approval indexes alone are safe to
backfill under traffic: see `_place`, `_waiting`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from storage.aws.errors import code, landed
from storage.aws.expressions import Item, Update, Value, n, s
from storage.aws.keeps import INLINE_ENTRY_LIMIT
from storage.aws.layout import (
    INBOX_PREFIX,
    INDEXED,
    INLINE_INBOX,
    META,
    PLACED,
    ROW_MARK,
    ROW_SUFFIX,
    bucket,
    conv_pk,
    counter_key,
    record_from_item,
    status_key,
    waiting_sk,
)
from storage.aws.tables import Tables
from storage.models import ConversationKey, Status, waitable

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef


@dataclass
class Migrated:
    records: int = 0
    indexed: int = 0
    counted: int = 0
    messages_moved: int = 0
    placed: int = 0
    waiting: int = 0


def migrate(tables: Tables) -> Migrated:
    done = Migrated()
    paginator = tables.dynamodb.get_paginator("scan")
    pages = paginator.paginate(
        TableName=tables.table,
        FilterExpression="sk = :meta",
        ExpressionAttributeValues={":meta": s(META)},
    )
    for page in pages:
        for item in page["Items"]:
            done.records += 1
            _migrate_record(tables, item, done)
            _place(tables, item, done)
            _waiting(tables, item, done)
    return done


def _place(tables: Tables, item: Item, done: Migrated) -> None:
    """A paused record written before the place index: give it its `place_key`, on the
    condition that its status is still the one read (a record that moved on meanwhile had
    the attribute set or removed by that very write)."""
    if Status(item["conv_status"]["S"]) not in PLACED or "place_key" in item:
        return
    key = ConversationKey.parse(item["conv_key"]["S"])
    if _set_while_status(tables, item, {"place_key": s(key.place)}):
        done.placed += 1  # else its status changed, or a second run placed it


def _waiting(tables: Tables, item: Item, done: Migrated) -> None:
    """A record awaiting approval written before the approval index: listed for its run's
    starter, waiting since its last activity, on the condition that its status is still the
    one read (a write since then set or removed the keys itself)."""
    record = record_from_item(item)
    if record.status is not Status.AWAITING_APPROVAL or "waiting_ws" in item:
        return
    if record.run_by is None or not waitable(record.run_by):
        return
    since = waiting_sk(record.run_by, record.last_activity_at)
    if _set_while_status(
        tables, item, {"waiting_ws": s(record.key.workspace), "waiting_sk": s(since)}
    ):
        done.waiting += 1


def _set_while_status(tables: Tables, item: Item, values: dict[str, Value]) -> bool:
    """Set `values` on the record `item`, on the condition that its status is still the one
    read and the first of them is not set yet (a write since then set or removed them
    itself, or a second run set them); False when it was not."""
    update = Update()
    for attribute, value in values.items():
        update.set(attribute, value)
    status = update.value("status", item["conv_status"])
    update.require(f"{update.name('conv_status')} = {status}")
    update.require(f"attribute_not_exists({update.name(next(iter(values)))})")
    key = {"pk": item["pk"], "sk": item["sk"]}
    return landed(
        lambda: tables.dynamodb.update_item(TableName=tables.table, Key=key, **update.expression())
    )


def _migrate_record(tables: Tables, item: Item, done: Migrated) -> None:
    record = record_from_item(item)
    shard = tables.shard(record.key)
    update = Update()
    actions: list[TransactWriteItemTypeDef] = []
    if record.status in INDEXED and "status_key" not in item:
        update.set("status_key", s(status_key(record.status, shard)))
        done.indexed += 1
    if "counted" not in item:
        counted = bucket(record.status, record.expires_at)
        update.set("counted", s(counted))
        update.require("attribute_not_exists(#counted)")
        status, day = counted.rsplit("#", 1)
        counter = Update()
        counter.add_to_set("n_" + status, n(1))
        actions.append({"Update": counter.as_update(tables.table, counter_key(shard, day))})
        done.counted += 1
    for row in _inbox_rows(tables, record.key):
        entry_id = row["sk"]["S"].removeprefix(INBOX_PREFIX)
        label = f"m{done.messages_moved}"
        update.names[f"#{label}"] = INLINE_INBOX + entry_id
        if len(row["entry"]["S"].encode()) <= INLINE_ENTRY_LIMIT:
            update.values[f":{label}"] = row["entry"]  # into the record; the row goes
            actions.append(
                {"Delete": {"TableName": tables.table, "Key": {"pk": row["pk"], "sk": row["sk"]}}}
            )
        else:
            update.values[f":{label}"] = s(ROW_MARK)  # too big: the record points at the row
        update.sets.append(f"#{label} = :{label}")
        done.messages_moved += 1
    if not update.sets:
        return
    update.require("attribute_exists(pk)")
    meta_key = {"pk": item["pk"], "sk": item["sk"]}
    try:
        tables.dynamodb.transact_write_items(
            TransactItems=[{"Update": update.as_update(tables.table, meta_key)}, *actions]
        )
    except ClientError as exc:
        if code(exc) != "TransactionCanceledException":
            raise  # counted meanwhile (a second run): nothing to do for this record


def _inbox_rows(tables: Tables, key: ConversationKey) -> list[Item]:
    """Rows of the first release's inbox (entry ids without the suffix of big messages)."""
    found = tables.dynamodb.query(
        TableName=tables.table,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :inbox)",
        ExpressionAttributeValues={":pk": s(conv_pk(key)), ":inbox": s(INBOX_PREFIX)},
        ConsistentRead=True,
    )
    rows: list[Item] = found["Items"]
    return [row for row in rows if not row["sk"]["S"].endswith(ROW_SUFFIX)]
