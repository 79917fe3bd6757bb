"""Replica heartbeats (see `storage.replicas`) as rows of one partition of the conversations'
table: a beat is one put of a small item (1 write unit), listing them one query of that
partition (a handful of replicas); DynamoDB's TTL removes replicas gone for good."""

from __future__ import annotations

from datetime import datetime

from storage.aws.expressions import n, s
from storage.aws.layout import REPLICAS, epoch_seconds, from_ms, ms, replica_key
from storage.aws.tables import Tables
from storage.replicas import BEAT_TTL, check_replica


class Replicas:
    def __init__(self, tables: Tables) -> None:
        self.t = tables

    def beat(self, replica: str) -> None:
        now = self.t.clock()
        item = replica_key(check_replica(replica)) | {
            "beat_ms": n(ms(now)),
            "expires_at": n(epoch_seconds(now + BEAT_TTL)),
        }
        self.t.dynamodb.put_item(TableName=self.t.table, Item=item)

    def beats(self) -> dict[str, datetime]:
        found: dict[str, datetime] = {}
        paginator = self.t.dynamodb.get_paginator("query")
        pages = paginator.paginate(
            TableName=self.t.table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": s(REPLICAS)},
            ConsistentRead=True,
        )
        for page in pages:
            for item in page.get("Items", []):
                found[item["sk"]["S"]] = from_ms(item["beat_ms"]["N"])
        return found
