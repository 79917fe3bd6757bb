"""Session items (the Agents SDK's history) as rows of the conversation: reading the latest
ones with the record in one query, popping the newest, clearing all."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from storage.aws import items as session_rows
from storage.aws.errors import code, first_failed
from storage.aws.expressions import Item, Update, n, s
from storage.aws.layout import (
    ITEM_PREFIX,
    META,
    conv_pk,
    expired,
    in_generation,
    meta_key,
    seq_of,
)
from storage.aws.tables import Tables
from storage.errors import LeaseLost, SessionConflict
from storage.models import ConversationKey, Lease
from storage.writes import SessionPage

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import QueryInputTypeDef, TransactWriteItemTypeDef


# Rows per query page at most: DynamoDB's Limit is a 32-bit number (the SDK's compaction
# asks for 2**31 - 1 items, "all"), and a page stops at 1 MB anyway; pages go on lazily.
PAGE_ROWS = 1_000
POP_ATTEMPTS = 10  # tries of a pop that loses to concurrent writers


class History:
    def __init__(
        self,
        tables: Tables,
        get_blob: Callable[[str], bytes],
        generation_of: Callable[[ConversationKey], int],
    ) -> None:
        self.t = tables
        self.get_blob = get_blob
        self.generation_of = generation_of

    def _rows_newest_first(self, key: ConversationKey, page_size: int | None) -> Iterator[Item]:
        """META first (it sorts after every ITEM#), then item rows, newest first."""
        query: QueryInputTypeDef = {
            "TableName": self.t.table,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {
                ":pk": s(conv_pk(key)),
                ":lo": s(ITEM_PREFIX),
                ":hi": s(META),
            },
            "ScanIndexForward": False,
            "ConsistentRead": True,
        }
        if page_size is not None:
            query["Limit"] = page_size
        paginator = self.t.dynamodb.get_paginator("query")
        # Lazily: callers usually stop after the first page.
        for page in paginator.paginate(**query):  # type: ignore[misc]
            yield from page["Items"]

    def _current_rows(
        self, key: ConversationKey, page_size: int | None
    ) -> tuple[Item | None, Iterator[Item]]:
        """The live META and an iterator over its generation's item rows above the floor,
        newest first. (None, empty) when the record is missing or expired."""
        rows = self._rows_newest_first(key, page_size)
        meta = next(rows, None)
        if meta is None or meta["sk"]["S"] != META or expired(meta, self.t.clock()):
            return None, iter(())
        generation = int(meta.get("generation", {"N": "0"})["N"])
        floor = int(meta["session_floor"]["N"])

        def mine() -> Iterator[Item]:
            for item_row in rows:
                sk = item_row["sk"]["S"]
                if not in_generation(sk, generation) or seq_of(sk) < floor:
                    return
                yield item_row

        return meta, mine()

    def read_items(self, key: ConversationKey, limit: int | None) -> SessionPage:
        if limit is not None:
            limit = max(limit, 0)
        # One row more than the items wanted (META comes first), within what a query takes.
        page_size = None if limit is None else min(limit + 1, PAGE_ROWS)
        meta, rows = self._current_rows(key, page_size)
        if meta is None:
            return SessionPage(items=[], next_seq=0)
        newest_first: list[str] = []
        for item_row in rows:
            found = session_rows.expand(item_row, self.get_blob)
            newest_first.extend(reversed(session_rows.readable(item_row, found)))
            if limit is not None and len(newest_first) >= limit:
                break  # before the iterator pulls another row (and maybe another page)
        if limit is not None:
            newest_first = newest_first[:limit]
        return SessionPage(items=newest_first[::-1], next_seq=int(meta["next_seq"]["N"]))

    def pop_item(self, key: ConversationKey, lease: Lease | None) -> str | None:
        conflicts = 0
        while True:
            meta, rows = self._current_rows(key, 2)
            if lease and (meta is None or not _held_by(meta, lease)):
                raise LeaseLost(str(key), lease.fence)
            item_row = next(rows, None)
            if meta is None or item_row is None:
                return None
            found = session_rows.expand(item_row, self.get_blob)
            left, item = session_rows.popped(item_row, found)
            actions: list[TransactWriteItemTypeDef] = [self._floor_check(key, meta, lease)]
            if "count" in item_row and left:
                actions.append(self._shrink_batch(item_row, len(found), left))
            else:
                actions.append(
                    {
                        "Delete": {
                            "TableName": self.t.table,
                            "Key": {"pk": item_row["pk"], "sk": item_row["sk"]},
                            "ConditionExpression": "attribute_exists(sk)",
                        }
                    }
                )
            try:
                self.t.dynamodb.transact_write_items(TransactItems=actions)
            except ClientError as exc:
                if code(exc) != "TransactionCanceledException":
                    raise
                if lease and first_failed(exc):
                    raise LeaseLost(str(key), lease.fence) from exc
                conflicts += 1
                if conflicts == POP_ATTEMPTS:
                    raise SessionConflict(f"{key}: pop kept losing to concurrent writers") from exc
                continue  # a concurrent pop or clear won: look again
            if item is not None:
                return item
            # The row held nothing readable (an expired blob, items not JSON): it is gone now.

    def _floor_check(
        self, key: ConversationKey, meta: Item, lease: Lease | None
    ) -> TransactWriteItemTypeDef:
        update = Update()
        floor = update.value("floor", meta["session_floor"])
        update.require(f"{update.name('session_floor')} = {floor}")
        if lease:
            update.fenced(lease.fence, lease.owner)
        return {"ConditionCheck": update.as_condition_check(self.t.table, meta_key(key))}

    def _shrink_batch(self, item_row: Item, count: int, left: int) -> TransactWriteItemTypeDef:
        return {
            "Update": {
                "TableName": self.t.table,
                "Key": {"pk": item_row["pk"], "sk": item_row["sk"]},
                "UpdateExpression": "SET #count = :new",
                "ConditionExpression": "#count = :old",
                "ExpressionAttributeNames": {"#count": "count"},
                "ExpressionAttributeValues": {":new": n(left), ":old": n(count)},
            }
        }

    def clear_items(self, key: ConversationKey, lease: Lease | None) -> None:
        generation = lease.generation if lease else self.generation_of(key)
        update = Update()
        update.sets.append("#session_floor = #next_seq")
        update.names |= {"#session_floor": "session_floor", "#next_seq": "next_seq"}
        update.require("attribute_exists(pk)")
        if lease:
            update.fenced(lease.fence, lease.owner)
        try:
            self.t.dynamodb.update_item(
                TableName=self.t.table, Key=meta_key(key), **update.expression()
            )
        except ClientError as exc:
            if code(exc) != "ConditionalCheckFailedException":
                raise
            if lease:
                raise LeaseLost(str(key), lease.fence) from exc
            return
        # The floor already hides the rows; deleting them is only housekeeping.
        rows = [
            r
            for r in self._rows_newest_first(key, None)
            if r["sk"]["S"] != META and in_generation(r["sk"]["S"], generation)
        ]
        for start in range(0, len(rows), 25):
            chunk = rows[start : start + 25]
            self.t.dynamodb.batch_write_item(
                RequestItems={
                    self.t.table: [
                        {"DeleteRequest": {"Key": {"pk": r["pk"], "sk": r["sk"]}}} for r in chunk
                    ]
                }
            )


def _held_by(meta: Item, lease: Lease) -> bool:
    owner = meta.get("lease_owner", {}).get("S")
    return int(meta["fence"]["N"]) == lease.fence and owner == lease.owner
