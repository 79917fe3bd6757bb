"""Operational queries in a bounded number of requests at any table size: lists through the
sharded status index (one query per shard, merged by activity), counts from the sharded
counters (one query per shard), a channel's paused threads through the place index (a few
pages of one partition), the approvals waiting on a person or in a workspace through the
approval index (one query of a person's entries; a few pages of a workspace's)."""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from storage.aws.expressions import Item, n, s
from storage.aws.layout import (
    PLACE_INDEX,
    PLACED,
    STATE_EXPIRES,
    STATUS_INDEX,
    WAITING_INDEX,
    day_of,
    expired,
    gone,
    ms,
    record_from_item,
    status_key,
)
from storage.aws.tables import Tables
from storage.listings import PAUSED_PAGES, WAITING_PAGES
from storage.models import Conversation, Status

EXPIRED_REMEMBERED = 10_000  # keys found expired, not read again (about 1 MB)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import QueryInputTypeDef


class ListingQueries:
    def __init__(self, tables: Tables) -> None:
        self.t = tables
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="status-shards")
        # Records found expired by a read (`_live`), by key and the TTL they were read
        # with: an expired state stays expired until a write (which moves the TTL) revives it.
        self.expired_seen: OrderedDict[str, str] = OrderedDict()

    def list_by_status(
        self, status: Status, *, idle_for: timedelta | None, limit: int
    ) -> list[Conversation]:
        """Least recently active first. Idle conversations are not indexed: listing them
        finds nothing (no operator query needs them)."""
        if status is Status.IDLE:
            return []
        now = self.t.clock()
        cutoff = ms(now - (idle_for or timedelta(0)))
        # Records outlive their state as tombstones: those whose state expired (a TTL after
        # their last activity) are not even read.
        since = ms(now - self.t.policies.state_ttl)
        shards = [
            self._shard(status_key(status, shard), since, cutoff, limit)
            for shard in range(self.t.policies.status_shards)
        ]
        merged = heapq.merge(*shards, key=lambda item: int(item["last_activity_ms"]["N"]))
        records: list[Conversation] = []
        for item in merged:
            if not self._live(item, now):
                continue
            records.append(self._listed(item))
            if len(records) >= limit:
                break
        return records

    def _listed(self, item: Item) -> Conversation:
        """A record as the status index carries it. The index holds the record's own TTL,
        not its state's expiry (which is a TTL after the last activity, see `Tables.touch`)."""
        record = record_from_item(item)
        return record.model_copy(
            update={"expires_at": record.last_activity_at + self.t.policies.state_ttl}
        )

    def _alive(self, item: Item, now: datetime) -> bool:
        return int(item["last_activity_ms"]["N"]) >= ms(now - self.t.policies.state_ttl)

    def _live(self, item: Item, now: datetime) -> bool:
        """Whether the listed record's state has not expired. The queries bound that by
        the last activity and today's TTL, which is not the TTL the record was written
        under once `BOT_STATE_TTL` was raised. The index carries the record's own TTL, a
        `tombstone_ttl` past its state's expiry: a record whose TTL says its state lives
        passes; any other (expired, or written before `state_expires` existed) is read
        from the table to be sure, once while its TTL stays the same, never a live one."""
        if not gone(item, now + self.t.policies.tombstone_ttl):
            return True
        pk, ttl = item["pk"]["S"], item.get("expires_at", {}).get("N", "")
        if self.expired_seen.get(pk) == ttl:
            return False
        found = self.t.dynamodb.get_item(
            TableName=self.t.table,
            Key={"pk": item["pk"], "sk": item["sk"]},
            ConsistentRead=True,
            ProjectionExpression="#s, expires_at",
            ExpressionAttributeNames={"#s": STATE_EXPIRES},
        ).get("Item")
        if found is not None and not expired(found, now):
            return True
        self.expired_seen[pk] = ttl
        if len(self.expired_seen) > EXPIRED_REMEMBERED:
            self.expired_seen.popitem(last=False)
        return False

    def _shard(self, key: str, since: int, cutoff: int, limit: int) -> Iterator[Item]:
        """One shard's matches, oldest activity first, fetched a page at a time as merged."""
        query: QueryInputTypeDef = {
            "TableName": self.t.table,
            "IndexName": STATUS_INDEX,
            "KeyConditionExpression": (
                "status_key = :key AND last_activity_ms BETWEEN :since AND :cutoff"
            ),
            "ExpressionAttributeValues": {
                ":key": s(key),
                ":since": n(since),
                ":cutoff": n(max(cutoff, since)),
            },
            "ScanIndexForward": True,
            "Limit": min(limit, 1000),
        }
        paginator = self.t.dynamodb.get_paginator("query")
        for page in paginator.paginate(**query):  # type: ignore[misc]
            yield from page["Items"]

    def list_starting(self, prefix: str, *, statuses: Sequence[Status]) -> list[Conversation]:
        """Every shard of every status, filtered on the key's start: a full read of those
        index partitions, for a rare event (a workspace uninstalled the app)."""
        partitions = [
            status_key(status, shard)
            for status in statuses
            for shard in range(self.t.policies.status_shards)
        ]
        now = self.t.clock()
        return [
            self._listed(item)
            for items in self.pool.map(lambda key: self._starting(key, prefix), partitions)
            for item in items
            if self._alive(item, now) and self._live(item, now)
        ]

    def _starting(self, key: str, prefix: str) -> list[Item]:
        query: QueryInputTypeDef = {
            "TableName": self.t.table,
            "IndexName": STATUS_INDEX,
            "KeyConditionExpression": "status_key = :key",
            "FilterExpression": "begins_with(conv_key, :prefix)",
            "ExpressionAttributeValues": {":key": s(key), ":prefix": s(prefix)},
        }
        paginator = self.t.dynamodb.get_paginator("query")
        return [item for page in paginator.paginate(**query) for item in page["Items"]]  # type: ignore[misc]

    def list_paused_in(
        self, place: str, *, participant: str | None, limit: int
    ) -> list[Conversation]:
        """One partition of the place index, newest first, a page of `limit` entries at a
        time, until `limit` are found or `PAUSED_PAGES` pages were read: at most that many
        requests, reading at most `limit * PAUSED_PAGES` index entries."""
        now = self.t.clock()
        values = {":place": s(place), ":since": n(ms(now - self.t.policies.state_ttl))}
        query: QueryInputTypeDef = {
            "TableName": self.t.table,
            "IndexName": PLACE_INDEX,
            # Not those whose state expired (tombstones): a TTL after their last activity.
            "KeyConditionExpression": "place_key = :place AND last_activity_ms >= :since",
            "ExpressionAttributeValues": values,
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if participant is not None:
            query["FilterExpression"] = "contains(participants, :user)"
            values[":user"] = s(participant)
        found: list[Conversation] = []
        for _ in range(PAUSED_PAGES):
            page = self.t.dynamodb.query(**query)
            found += [
                self._listed(item)
                for item in page["Items"]
                # A replica of an earlier release (a rolling update) moves the status
                # without the place key: the projected status has the last word.
                if Status(item["conv_status"]["S"]) in PLACED and self._live(item, now)
            ]
            if len(found) >= limit or "LastEvaluatedKey" not in page:
                break
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return found[:limit]

    def list_waiting_on(self, workspace: str, user: str, *, limit: int) -> list[Conversation]:
        """One query of the person's entries in the approval index, newest first."""
        query = self._waiting_query(workspace, limit, user)
        query["ScanIndexForward"] = False
        page = self.t.dynamodb.query(**query)
        now = self.t.clock()
        return [self._listed(item) for item in page["Items"] if self._waits(item, now)]

    def list_waiting_in(self, workspace: str, *, limit: int) -> list[Conversation]:
        """The workspace's partition of the approval index, a page of `limit` entries at a
        time, at most `WAITING_PAGES` pages; the most recently waiting of them first."""
        query = self._waiting_query(workspace, limit)
        now = self.t.clock()
        found: list[Conversation] = []
        for _ in range(WAITING_PAGES):
            page = self.t.dynamodb.query(**query)
            found += [self._listed(item) for item in page["Items"] if self._waits(item, now)]
            if "LastEvaluatedKey" not in page:
                break
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        found.sort(key=lambda r: r.waiting_since or r.last_activity_at, reverse=True)
        return found[:limit]

    def _waiting_query(
        self, workspace: str, limit: int, user: str | None = None
    ) -> QueryInputTypeDef:
        """The workspace's entries of the approval index (one person's, with `user`)."""
        since = ms(self.t.clock() - self.t.policies.state_ttl)
        condition = "waiting_ws = :ws"
        values = {":ws": s(workspace), ":since": n(since)}
        if user is not None:
            condition += " AND begins_with(waiting_sk, :user)"
            values[":user"] = s(f"{user}#")
        return {
            "TableName": self.t.table,
            "IndexName": WAITING_INDEX,
            "KeyConditionExpression": condition,
            # Not those whose state expired (tombstones): a TTL after their last activity.
            "FilterExpression": "last_activity_ms >= :since",
            "ExpressionAttributeValues": values,
            "Limit": limit,
        }

    def _waits(self, item: Item, now: datetime) -> bool:
        """A replica of an earlier release moves the status without the approval index's
        keys: the projected status has the last word."""
        return Status(item["conv_status"]["S"]) is Status.AWAITING_APPROVAL and self._live(
            item, now
        )

    def count_by_status(self) -> dict[Status, int]:
        """From the counters: conversations by the status they last settled in, whose state
        has not expired (to the day). Running ones are counted from the index (few)."""
        today = day_of(self.t.clock())
        counts = dict.fromkeys(Status, 0)
        for items in self.pool.map(
            lambda shard: self._counters(shard, today), range(self.t.policies.status_shards)
        ):
            for item in items:
                for name, value in item.items():
                    if name.startswith("n_"):
                        try:
                            counts[Status(name[2:])] += int(value["N"])
                        except ValueError:
                            continue
        counts[Status.RUNNING] = sum(
            self.pool.map(
                lambda shard: self._count_live(status_key(Status.RUNNING, shard)),
                range(self.t.policies.status_shards),
            )
        )
        return {status: max(count, 0) for status, count in counts.items()}

    def _counters(self, shard: int, today: str) -> list[Item]:
        found = self.t.dynamodb.query(
            TableName=self.t.table,
            KeyConditionExpression="pk = :pk AND sk >= :today",
            ExpressionAttributeValues={":pk": s(f"COUNT#{shard:03d}"), ":today": s(f"DAY#{today}")},
        )
        items: list[Item] = found["Items"]
        return items

    def _count_live(self, key: str) -> int:
        """The index partition's records whose state has not expired, as the listings see
        them (`_live`: after a raise of `BOT_STATE_TTL`, not those that expired under the
        old one). Read, not counted by DynamoDB: only the keys and TTL, of few records."""
        now = self.t.clock()
        since = ms(now - self.t.policies.state_ttl)
        query: dict[str, Any] = {
            "TableName": self.t.table,
            "IndexName": STATUS_INDEX,
            "KeyConditionExpression": "status_key = :key AND last_activity_ms >= :since",
            "ExpressionAttributeValues": {":key": s(key), ":since": n(since)},
            "ProjectionExpression": "pk, sk, expires_at",
        }
        paginator = self.t.dynamodb.get_paginator("query")
        return sum(
            self._live(item, now) for page in paginator.paginate(**query) for item in page["Items"]
        )

    def close(self) -> None:
        self.pool.shutdown(wait=False)
