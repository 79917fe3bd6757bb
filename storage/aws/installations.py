"""Installation documents, one-time states and removals, as rows of the conversations'
table (see `layout`): a document is one item, written whole (the latest wins); a state is
consumed by a conditional delete, so two consumers of one state cannot both succeed; a
removal is recorded by a conditional put (the first wins), in one partition, so that the
pending ones are one query (there are few: one per uninstall, each gone a day after it is
finished)."""

from __future__ import annotations

from datetime import timedelta

from storage.aws.errors import landed
from storage.aws.expressions import n, s
from storage.aws.layout import REMOVALS, epoch_seconds, install_key, ms, removal_key, state_key
from storage.aws.tables import Tables
from storage.installations import Removal, check_document, check_id


class Installations:
    def __init__(self, tables: Tables) -> None:
        self.t = tables

    def save(self, install_id: str, document: str) -> None:
        item = install_key(check_id(install_id)) | {
            "doc": s(check_document(document)),
            "updated_ms": n(ms(self.t.clock())),
        }
        self.t.dynamodb.put_item(TableName=self.t.table, Item=item)

    def find(self, install_id: str) -> str | None:
        found = self.t.dynamodb.get_item(
            TableName=self.t.table, Key=install_key(install_id), ConsistentRead=True
        )
        item = found.get("Item")
        return item["doc"]["S"] if item is not None else None

    def delete(self, install_id: str, *, only: str | None) -> bool:
        if only is None:
            gone = self.t.dynamodb.delete_item(
                TableName=self.t.table, Key=install_key(install_id), ReturnValues="ALL_OLD"
            )
            return bool(gone.get("Attributes"))
        return landed(
            lambda: self.t.dynamodb.delete_item(
                TableName=self.t.table,
                Key=install_key(install_id),
                ConditionExpression="doc = :doc",
                ExpressionAttributeValues={":doc": s(only)},
            )
        )

    def record_removal(self, removal: Removal) -> bool:
        """Pending while it has no `expires_at` (TTL deletes late: past it, it counts as
        absent)."""
        item = removal_key(check_id(removal.removal_id, "removal id")) | {
            "doc": s(removal.model_dump_json())
        }
        return landed(
            lambda: self.t.dynamodb.put_item(
                TableName=self.t.table,
                Item=item,
                ConditionExpression="attribute_not_exists(pk) OR expires_at < :now",
                ExpressionAttributeValues={":now": n(epoch_seconds(self.t.clock()))},
            )
        )

    def find_removal(self, removal_id: str) -> Removal | None:
        found = self.t.dynamodb.get_item(
            TableName=self.t.table, Key=removal_key(removal_id), ConsistentRead=True
        )
        item = found.get("Item")
        if item is None:
            return None
        expires = item.get("expires_at")
        if expires is not None and int(expires["N"]) < epoch_seconds(self.t.clock()):
            return None
        return Removal.model_validate_json(item["doc"]["S"])

    def pending_removals(self) -> list[Removal]:
        found: list[Removal] = []
        paginator = self.t.dynamodb.get_paginator("query")
        pages = paginator.paginate(
            TableName=self.t.table,
            KeyConditionExpression="pk = :pk",
            FilterExpression="attribute_not_exists(expires_at)",
            ExpressionAttributeValues={":pk": s(REMOVALS)},
            ConsistentRead=True,
        )
        for page in pages:
            found += [Removal.model_validate_json(i["doc"]["S"]) for i in page.get("Items", [])]
        return sorted(found, key=lambda removal: removal.at)

    def finish_removal(self, removal_id: str) -> None:
        now = self.t.clock()
        landed(  # not landed: finished already, or unknown
            lambda: self.t.dynamodb.update_item(
                TableName=self.t.table,
                Key=removal_key(removal_id),
                UpdateExpression="SET expires_at = :expires, finished_ms = :now",
                ConditionExpression="attribute_exists(pk) AND attribute_not_exists(expires_at)",
                ExpressionAttributeValues={
                    ":expires": n(epoch_seconds(now + self.t.policies.event_ttl)),
                    ":now": n(ms(now)),
                },
            )
        )

    def issue_state(self, state: str, ttl: timedelta) -> bool:
        """One conditional put: over nothing, or over a state that expired (TTL deletes
        late)."""
        now = self.t.clock()
        item = state_key(check_id(state, "state")) | {"expires_at": n(epoch_seconds(now + ttl))}
        return landed(
            lambda: self.t.dynamodb.put_item(
                TableName=self.t.table,
                Item=item,
                ConditionExpression="attribute_not_exists(pk) OR expires_at < :now",
                ExpressionAttributeValues={":now": n(epoch_seconds(now))},
            )
        )

    def consume_state(self, state: str) -> bool:
        """One conditional delete; TTL deletes late, so an expired state counts as absent."""
        return landed(
            lambda: self.t.dynamodb.delete_item(
                TableName=self.t.table,
                Key=state_key(state),
                ConditionExpression="attribute_exists(pk) AND expires_at >= :now",
                ExpressionAttributeValues={":now": n(epoch_seconds(self.t.clock()))},
            )
        )
