"""The conversation record on aws: reading it, and taking and renewing its lease (a
record whose state expired is brought back by the take that finds it, see `expired`); and
the replicas' heartbeats (`storage.replicas`), which tell whether a lease's holder still
lives: rows of one partition of the table, a beat one put of a small item (1 write unit),
listing them one query of that partition (a handful of replicas); DynamoDB's TTL removes
replicas gone for good. Keeping messages in the record is `keeps`'."""

from __future__ import annotations

from datetime import datetime

from botocore.exceptions import ClientError

from storage.aws.errors import code
from storage.aws.expired import forget_expired, revive
from storage.aws.expressions import Item, Update, n, s
from storage.aws.layout import (
    REPLICAS,
    STATE_EXPIRES,
    epoch_seconds,
    expired,
    expired_claims,
    from_ms,
    gone,
    meta_key,
    ms,
    record_from_item,
    replica_key,
)
from storage.aws.summaries import renewal_due
from storage.aws.tables import Tables
from storage.errors import LeaseBusy, LeaseLost, NotFound, StorageError
from storage.models import (
    Conversation,
    ConversationKey,
    Lease,
)
from storage.replicas import BEAT_TTL, check_replica
from storage.writes import LeaseRequest


class Records:
    def __init__(self, tables: Tables) -> None:
        self.t = tables

    def get(self, key: ConversationKey) -> Conversation | None:
        found = self.t.dynamodb.get_item(
            TableName=self.t.table, Key=meta_key(key), ConsistentRead=True
        )
        item: Item | None = found.get("Item")
        if item is None or expired(item, self.t.clock()):
            return None
        return record_from_item(item, with_inbox=True)

    def expired_record(self, key: ConversationKey) -> Conversation | None:
        found = self.t.dynamodb.get_item(
            TableName=self.t.table, Key=meta_key(key), ConsistentRead=True
        )
        item: Item | None = found.get("Item")
        now = self.t.clock()
        if item is None or not expired(item, now) or gone(item, now):
            return None
        return record_from_item(item)

    # -- leases -------------------------------------------------------------------------

    def acquire(self, request: LeaseRequest) -> tuple[Lease, Conversation]:
        for _ in range(2):
            now = self.t.clock()
            update = Update()
            self.take(update, request.owner, now)
            update.set("updated_ms", n(ms(now)))
            if request.status is not None:
                self.t.set_status(update, request.key, request.status)
            self.t.initialise(update, request.key, now)
            update.require(self.t.live(update, now, create=request.create))
            if request.takeover_from is not None:
                update.require(
                    f"{self.t.lease_free(update, now)} OR "
                    f"#lease_owner = {update.value('dead', s(request.takeover_from))}"
                )
            elif not request.force:
                update.require(self.t.lease_free(update, now))
            try:
                result = self.t.dynamodb.update_item(
                    TableName=self.t.table,
                    Key=meta_key(request.key),
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    **update.expression(),
                )
            except ClientError as exc:
                if code(exc) != "ConditionalCheckFailedException":
                    raise
                old: Item | None = exc.response.get("Item")  # type: ignore[assignment]
                if old is None:
                    raise NotFound(str(request.key)) from exc
                if gone(old, now):
                    if request.create and forget_expired(self.t, request.key, old):
                        continue
                    raise NotFound(str(request.key)) from exc
                if expired(old, now):
                    if request.create:
                        revive(self.t, request.key, old, now)
                        continue
                    raise NotFound(str(request.key)) from exc
                holder = record_from_item(old, with_inbox=True)
                if holder.lease_owner == request.owner and holder.lease_expires_at is not None:
                    return Lease.held_in(holder), holder  # our own attempt landed; answer was lost
                raise LeaseBusy(
                    str(request.key), holder.lease_owner, holder.lease_expires_at
                ) from exc
            item = result["Attributes"]
            record = record_from_item(item, with_inbox=True)
            due = renewal_due(self.t, item, now)
            return Lease.held_in(record, expired_claims(item, now), summary_due=due), record
        raise StorageError(f"{request.key}: its expired record could not be replaced")

    def take(
        self,
        update: Update,
        owner: str,
        now: datetime,
        *,
        keep_stop: bool = False,
    ) -> None:
        if not keep_stop:  # a stop asked of an earlier run is not this one's
            update.remove("stop_by")
        update.increment("fence")
        update.set("lease_owner", s(owner))
        update.set("lease_expires_ms", n(ms(now + self.t.policies.lease_duration)))

    def renew(self, lease: Lease, *, working: bool) -> Lease:
        now = self.t.clock()
        expires = now + self.t.policies.lease_duration
        update = Update()
        update.set("lease_expires_ms", n(ms(expires)))
        update.fenced(lease.fence, lease.owner)
        if working:  # a run in progress is activity: its state lives on (not if gone)
            update.require(self.t.live(update, now, create=False))
            update.set(STATE_EXPIRES, n(epoch_seconds(self.t.policies.expiry(now))))
            update.set("expires_at", n(epoch_seconds(self.t.policies.record_ttl(now))))
        try:
            result = self.t.dynamodb.update_item(
                TableName=self.t.table,
                Key=meta_key(lease.key),
                ReturnValues="ALL_NEW",  # to learn whether a stop was asked
                **update.expression(),
            )
        except ClientError as exc:
            if code(exc) == "ConditionalCheckFailedException":
                raise LeaseLost(str(lease.key), lease.fence) from exc
            raise
        now_item: Item = result.get("Attributes", {})
        stop = now_item.get("stop_by", {}).get("S")
        return lease.model_copy(update={"expires_at": expires, "stop_by": stop})

    def stop_requested(self, key: ConversationKey) -> str | None:
        found = self.t.dynamodb.get_item(
            TableName=self.t.table,
            Key=meta_key(key),
            ConsistentRead=True,
            ProjectionExpression="stop_by",
        )
        value: str | None = found.get("Item", {}).get("stop_by", {}).get("S")
        return value


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
