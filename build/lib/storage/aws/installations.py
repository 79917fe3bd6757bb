"""Installation documents and one-time states, as rows of the conversations' table (see
`layout`): a document is one item, written whole (the latest wins); a state is consumed by a
conditional delete, so two consumers of one state cannot both succeed."""

from __future__ import annotations

from datetime import timedelta

from botocore.exceptions import ClientError

from storage.aws.errors import code
from storage.aws.expressions import n, s
from storage.aws.layout import epoch_seconds, install_key, ms, state_key
from storage.aws.tables import Tables
from storage.installations import check_document, check_id


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

    def delete(self, install_id: str) -> bool:
        gone = self.t.dynamodb.delete_item(
            TableName=self.t.table, Key=install_key(install_id), ReturnValues="ALL_OLD"
        )
        return bool(gone.get("Attributes"))

    def issue_state(self, state: str, ttl: timedelta) -> bool:
        """One conditional put: over nothing, or over a state that expired (TTL deletes
        late)."""
        now = self.t.clock()
        item = state_key(check_id(state, "state")) | {"expires_at": n(epoch_seconds(now + ttl))}
        try:
            self.t.dynamodb.put_item(
                TableName=self.t.table,
                Item=item,
                ConditionExpression="attribute_not_exists(pk) OR expires_at < :now",
                ExpressionAttributeValues={":now": n(epoch_seconds(now))},
            )
        except ClientError as exc:
            if code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def consume_state(self, state: str) -> bool:
        """One conditional delete; TTL deletes late, so an expired state counts as absent."""
        try:
            self.t.dynamodb.delete_item(
                TableName=self.t.table,
                Key=state_key(state),
                ConditionExpression="attribute_exists(pk) AND expires_at >= :now",
                ExpressionAttributeValues={":now": n(epoch_seconds(self.t.clock()))},
            )
        except ClientError as exc:
            if code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True
