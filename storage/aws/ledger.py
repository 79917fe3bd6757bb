"""Ledgers: tool calls per conversation (at most once) and globally claimed event ids."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from storage.aws import tools as ledger_rows
from storage.aws.errors import code, first_failed, is_transient, landed
from storage.aws.expressions import Item, Update, n, s
from storage.aws.layout import conv_pk, epoch_seconds, meta_key, tool_sk
from storage.aws.tables import Tables
from storage.errors import LeaseLost, StorageError
from storage.ledger import started
from storage.models import ConversationKey, Lease, ToolCallClaim, ToolCallRecord, ToolCallStatus
from storage.text import plain_text

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef


@dataclass
class Ledger:
    t: Tables
    generation_of: Callable[[ConversationKey], int]
    put_blob: Callable[[str, bytes], None]
    get_blob: Callable[[str], bytes]

    def claim_event(self, event_id: str) -> bool:
        now = self.t.clock()
        seconds = epoch_seconds(now)
        return landed(
            lambda: self.t.dynamodb.put_item(
                TableName=self.t.table,
                Item={
                    "pk": s(f"EVENT#{event_id}"),
                    "sk": s("EVENT"),
                    "expires_at": n(seconds + int(self.t.policies.event_ttl.total_seconds())),
                },
                # TTL deletes late: an expired claim counts as absent.
                ConditionExpression="attribute_not_exists(pk) OR expires_at < :now",
                ExpressionAttributeValues={":now": n(seconds)},
            )
        )

    def event_claimed(self, event_id: str) -> bool:
        found = self.t.dynamodb.get_item(
            TableName=self.t.table,
            Key={"pk": s(f"EVENT#{event_id}"), "sk": s("EVENT")},
            ConsistentRead=True,
        )
        item = found.get("Item")
        # TTL deletes late: an expired claim counts as absent, as in `claim_event`.
        return item is not None and int(item["expires_at"]["N"]) >= epoch_seconds(self.t.clock())

    def begin(self, lease: Lease, call_id: str, tool_name: str, arguments: str) -> ToolCallClaim:
        now = self.t.clock()
        record = started(lease, call_id, tool_name, arguments, now)
        item = ledger_rows.started_row(
            record, lease.generation, self.t.policies.expiry(now), self.put_blob
        )
        actions: list[TransactWriteItemTypeDef] = [
            self._lease_check(lease),
            {
                "Put": {
                    "TableName": self.t.table,
                    "Item": item,
                    # absent, or approved by a commit and not started yet: this starts it
                    "ConditionExpression": "attribute_not_exists(sk) OR #status = :approved",
                    "ExpressionAttributeNames": {"#status": "status"},
                    "ExpressionAttributeValues": {":approved": s(ToolCallStatus.APPROVED.value)},
                }
            },
        ]
        try:
            self.t.dynamodb.transact_write_items(
                TransactItems=actions, ClientRequestToken=uuid.uuid4().hex
            )
        except ClientError as exc:
            if code(exc) != "TransactionCanceledException":
                raise
            if first_failed(exc):
                raise LeaseLost(str(lease.key), lease.fence) from exc
            existing = self.get(lease.key, call_id, lease.generation)
            if existing is None:
                raise
            return ToolCallClaim(record=existing, created=False)
        return ToolCallClaim(record=record, created=True)

    def complete(self, lease: Lease, call_id: str, output: str, *, status: ToolCallStatus) -> bool:
        """One write (fenced, conditional on the call being started, or, for a cancellation,
        approved); no read. True when recorded under the lease; False when recorded after the
        lease was taken from us, under the fence the call was started with (see
        `Store.complete_tool_call`)."""
        now = self.t.clock()
        output = plain_text(output)
        update = ledger_rows.completion(
            lease.key, call_id, output, now, self.t.policies.expiry(now), self.put_blob, status
        )
        key = {"pk": s(conv_pk(lease.key)), "sk": s(tool_sk(lease.generation, call_id))}
        target = update.as_update(self.t.table, key)
        target["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        actions: list[TransactWriteItemTypeDef] = [
            self._lease_check(lease),
            {"Update": target},
        ]
        try:
            self.t.dynamodb.transact_write_items(
                TransactItems=actions, ClientRequestToken=uuid.uuid4().hex
            )
        except ClientError as exc:
            if code(exc) != "TransactionCanceledException" or is_transient(exc):
                raise  # a conflict or throttling cancelled it: nothing landed, try again
            if first_failed(exc):
                if self._complete_orphan(lease, update, key):
                    return False
                raise LeaseLost(str(lease.key), lease.fence) from exc
            existing = self.get(lease.key, call_id, lease.generation)
            if existing is not None and existing.status is status and existing.output == output:
                return True  # our own earlier attempt landed
            raise StorageError(f"tool call {call_id} is not started in {lease.key}") from exc
        return True

    def _complete_orphan(self, lease: Lease, update: Update, key: Item) -> bool:
        """The lease is gone (a discard took it): record the result all the same, if the
        call is still `started` under our fence: nobody else can have run it (an
        `approved` one is its new holder's to start or cancel)."""
        update.require(f"{update.name('status')} = {update.value('our_start', s('started'))}")
        update.require(f"{update.name('fence')} = {update.value('our_fence', n(lease.fence))}")
        return landed(
            lambda: self.t.dynamodb.update_item(
                TableName=self.t.table, Key=key, **update.expression()
            )
        )

    def retry(self, lease: Lease, call_id: str, *, max_attempts: int) -> ToolCallRecord | None:
        """One transaction: the lease's check and the call's conditional update."""
        update = ledger_rows.retry(lease.fence, self.t.clock(), max_attempts)
        key = {"pk": s(conv_pk(lease.key)), "sk": s(tool_sk(lease.generation, call_id))}
        actions: list[TransactWriteItemTypeDef] = [
            self._lease_check(lease),
            {"Update": update.as_update(self.t.table, key)},
        ]
        try:
            self.t.dynamodb.transact_write_items(
                TransactItems=actions, ClientRequestToken=uuid.uuid4().hex
            )
        except ClientError as exc:
            if code(exc) != "TransactionCanceledException" or is_transient(exc):
                # A conflict (another write to the record at that moment) or throttling
                # cancelled it: nothing landed and the call's attempts are not spent.
                raise
            if first_failed(exc):
                raise LeaseLost(str(lease.key), lease.fence) from exc
            return None  # completed meanwhile, or its attempts are spent
        return self.get(lease.key, call_id, lease.generation)

    def get(
        self, key: ConversationKey, call_id: str, generation: int | None
    ) -> ToolCallRecord | None:
        if generation is None:
            generation = self.generation_of(key)
        found = self.t.dynamodb.get_item(
            TableName=self.t.table,
            Key={"pk": s(conv_pk(key)), "sk": s(tool_sk(generation, call_id))},
            ConsistentRead=True,
        )
        item: Item | None = found.get("Item")
        if item is None:
            return None
        return ledger_rows.record_from_row(key, call_id, item, self.get_blob)

    def _lease_check(self, lease: Lease) -> TransactWriteItemTypeDef:
        update = Update()
        update.fenced(lease.fence, lease.owner)
        return {"ConditionCheck": update.as_condition_check(self.t.table, meta_key(lease.key))}
