"""The conversation record: reading it, taking and renewing its lease, and keeping messages
in it. Keeping a message, claiming its event id and (when free) taking the thread is ONE
conditional write that returns the whole record, inbox included."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from storage.aws.errors import code
from storage.aws.expressions import Item, Update, n, s, ss
from storage.aws.layout import (
    INBOX_PREFIX,
    INLINE_INBOX,
    LEGACY_CLAIM,
    ROW_MARK,
    ROW_SUFFIX,
    claim_digest,
    claim_sets,
    claimed,
    conv_pk,
    epoch_seconds,
    expired,
    expired_claims,
    inbox_sk,
    inline_entries,
    meta_key,
    ms,
    record_from_item,
)
from storage.aws.tables import Tables
from storage.base import Kept
from storage.errors import LeaseBusy, LeaseLost, NotFound, StorageError
from storage.models import (
    Conversation,
    ConversationKey,
    InboxEntry,
    Lease,
    Status,
    inbox_stamp,
    stamp_ms,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import QueryInputTypeDef, TransactWriteItemTypeDef

CONDITION_FAILED = ("ConditionalCheckFailedException", "TransactionCanceledException")
INLINE_ENTRY_LIMIT = 16_000  # bytes of one queued message kept in the record itself


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

    # -- leases -------------------------------------------------------------------------

    def acquire(
        self,
        key: ConversationKey,
        owner: str,
        *,
        status: Status | None,
        force: bool,
        create: bool,
        takeover_from: str | None,
    ) -> tuple[Lease, Conversation]:
        for _ in range(2):
            now = self.t.clock()
            update = Update()
            self._take(update, owner, now)
            update.set("updated_ms", n(ms(now)))
            if status is not None:
                self.t.set_status(update, key, status)
            self.t.initialise(update, key, now)
            update.require(self.t.live(update, now, create=create))
            if takeover_from is not None:
                update.require(
                    f"{self.t.lease_free(update, now)} OR "
                    f"#lease_owner = {update.value('dead', s(takeover_from))}"
                )
            elif not force:
                update.require(self.t.lease_free(update, now))
            try:
                result = self.t.dynamodb.update_item(
                    TableName=self.t.table,
                    Key=meta_key(key),
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    **update.expression(),
                )
            except ClientError as exc:
                if code(exc) != "ConditionalCheckFailedException":
                    raise
                old: Item | None = exc.response.get("Item")  # type: ignore[assignment]
                if old is None:
                    raise NotFound(str(key)) from exc
                if expired(old, now):
                    if create and self.forget_expired(key, old):
                        continue
                    raise NotFound(str(key)) from exc
                holder = record_from_item(old, with_inbox=True)
                if holder.lease_owner == owner and holder.lease_expires_at is not None:
                    return lease_of(holder), holder  # our own attempt landed; answer was lost
                raise LeaseBusy(str(key), holder.lease_owner, holder.lease_expires_at) from exc
            item = result["Attributes"]
            record = record_from_item(item, with_inbox=True)
            return lease_of(record, expired_claims(item, now)), record
        raise StorageError(f"{key}: its expired record could not be replaced")

    def _take(self, update: Update, owner: str, now: datetime) -> None:
        update.remove("stop_by")  # a stop asked of an earlier run is not this one's
        update.increment("fence")
        update.set("lease_owner", s(owner))
        update.set("lease_expires_ms", n(ms(now + self.t.lease_duration)))

    def renew(self, lease: Lease) -> Lease:
        expires = self.t.clock() + self.t.lease_duration
        update = Update()
        update.set("lease_expires_ms", n(ms(expires)))
        update.fenced(lease.fence, lease.owner)
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

    def request_stop(self, key: ConversationKey, user: str) -> Conversation | None:
        now = self.t.clock()
        update = Update()
        update.set("stop_by", s(user))
        cutoff = update.value("cutoff", n(ms(self.t.takeover_cutoff(now))))
        update.require(
            f"attribute_exists({update.name('lease_owner')}) AND "
            f"{update.name('lease_expires_ms')} >= {cutoff}"
        )
        try:
            result = self.t.dynamodb.update_item(
                TableName=self.t.table,
                Key=meta_key(key),
                ReturnValues="ALL_NEW",
                **update.expression(),
            )
        except ClientError as exc:
            if code(exc) == "ConditionalCheckFailedException":
                return None  # nothing holds the thread (or there is no such thread)
            raise
        return record_from_item(result["Attributes"])

    def forget_expired(self, key: ConversationKey, old: Item) -> bool:
        """Delete a record past its TTL (what DynamoDB's TTL would do, late), so that it can be
        created again as a new generation. False if it changed meanwhile."""
        try:
            self.t.dynamodb.delete_item(
                TableName=self.t.table,
                Key=meta_key(key),
                ConditionExpression="#expires_at = :old",
                ExpressionAttributeNames={"#expires_at": "expires_at"},
                ExpressionAttributeValues={":old": old["expires_at"]},
            )
        except ClientError as exc:
            if code(exc) != "ConditionalCheckFailedException":
                raise
            return False
        return True

    # -- keeping messages ---------------------------------------------------------------

    def keep(
        self,
        key: ConversationKey,
        event_id: str,
        payload: str,
        *,
        create: bool,
        participant: str | None,
        owner: str | None,
        token: str | None,
    ) -> Kept:
        take = owner is not None
        for _ in range(3):
            now = self.t.clock()
            entry_id = f"{inbox_stamp(now)}#{event_id}"
            if len(payload.encode()) > INLINE_ENTRY_LIMIT:
                entry_id += ROW_SUFFIX  # too big for the record: it gets its own row
            entry = InboxEntry(
                entry_id=entry_id,
                event_id=event_id,
                payload=payload,
                received_at=now,
                token=token or "",
            )
            update = Update()
            if take:
                assert owner is not None
                self._take(update, owner, now)
                update.require(self.t.lease_free(update, now))
            self._keep_update(update, key, entry, now, create=create, participant=participant)
            try:
                item = self._write_keep(key, entry, update)
            except ClientError as exc:
                if code(exc) not in (
                    "ConditionalCheckFailedException",
                    "TransactionCanceledException",
                ):
                    raise
                old = _failed_item(exc)
                if old is None:
                    if create:
                        continue  # created meanwhile by another writer: look again
                    raise NotFound(str(key)) from exc
                if expired(old, now):
                    if create and self.forget_expired(key, old):
                        continue
                    raise NotFound(str(key)) from exc
                if claimed(old, event_id, now, self.t.claim_ttl):
                    # Our own earlier attempt (same token) whose answer was lost is a keep;
                    # anything else with this event id is a duplicate delivery.
                    mine = bool(token) and any(
                        e.event_id == event_id and e.token == token for e in inline_entries(old)[0]
                    )
                    return Kept(kept=mine)
                if take:
                    take = False  # the thread is busy: keep only; its holder will serve it
                    continue
                raise
            if item is None:  # written in a transaction: nothing came back, so read it
                record = self.get(key)
                if take and record is not None and record.lease_owner == owner:
                    return Kept(kept=True, lease=lease_of(record), record=record)
                return Kept(kept=True)
            record = record_from_item(item, with_inbox=True)
            lease = lease_of(record, expired_claims(item, now)) if take else None
            return Kept(kept=True, lease=lease, record=record)
        raise StorageError(f"{key}: keeping a message kept losing to concurrent writers")

    def _keep_update(
        self,
        update: Update,
        key: ConversationKey,
        entry: InboxEntry,
        now: datetime,
        *,
        create: bool,
        participant: str | None,
    ) -> None:
        update.increment("inbox_seq")
        self.t.set_status(update, key, Status.RUNNING)
        self.t.touch(update, now)
        self.t.initialise(update, key, now)
        if participant:
            update.add_to_set("participants", ss([participant]))
        inline = ROW_MARK if entry.entry_id.endswith(ROW_SUFFIX) else entry.model_dump_json()
        update.names["#entry"] = INLINE_INBOX + entry.entry_id
        update.values[":entry"] = s(inline)
        update.sets.append("#entry = :entry")
        update.require(self.t.live(update, now, create=create))
        # The event's claim: refused if this period's or the last one's set holds it.
        current, previous, upcoming = claim_sets(now, self.t.claim_ttl)
        digest = claim_digest(entry.event_id)
        update.add_to_set(current, ss([digest]))
        update.remove(upcoming)
        claim = update.value("claim", s(digest))
        update.require(
            f"NOT contains({update.name(current)}, {claim}) AND "
            f"NOT contains({update.name(previous)}, {claim})"
        )
        # A claim written before the sets (by the previous version, within its claim_ttl).
        update.names["#legacy_claim"] = LEGACY_CLAIM + entry.event_id
        over = update.value("now_claim", n(epoch_seconds(now)))
        update.require(f"attribute_not_exists(#legacy_claim) OR #legacy_claim < {over}")

    def _write_keep(self, key: ConversationKey, entry: InboxEntry, update: Update) -> Item | None:
        """One UpdateItem returning the record; a message too big for the record goes to
        its own row, in one transaction with the update (which then returns nothing)."""
        if update.values[":entry"] != s(ROW_MARK):
            result = self.t.dynamodb.update_item(
                TableName=self.t.table,
                Key=meta_key(key),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **update.expression(),
            )
            found: Item = result["Attributes"]
            return found
        actions: list[TransactWriteItemTypeDef] = [
            {"Update": update.as_update(self.t.table, meta_key(key))},
            {
                "Put": {
                    "TableName": self.t.table,
                    "Item": {
                        "pk": s(conv_pk(key)),
                        "sk": s(inbox_sk(entry.entry_id)),
                        "entry": s(entry.model_dump_json()),
                        "expires_at": n(epoch_seconds(self.t.expiry(entry.received_at))),
                    },
                }
            },
        ]
        self.t.dynamodb.transact_write_items(TransactItems=actions)
        return None

    def read_inbox(self, key: ConversationKey, generation: int | None) -> list[InboxEntry]:
        found = self.t.dynamodb.get_item(
            TableName=self.t.table, Key=meta_key(key), ConsistentRead=True
        )
        item: Item | None = found.get("Item")
        if item is None:
            return []
        entries, in_rows = inline_entries(item)
        if in_rows:  # messages too big for the record
            entries = sorted(entries + self._row_entries(key), key=lambda e: e.entry_id)
        if generation:
            # Left behind by an expired record: every message of that record arrived at
            # least a TTL before it expired and this generation began. (A message kept a
            # moment before the record's creation by another replica is this generation's.)
            cutoff = generation - int(self.t.state_ttl.total_seconds() * 1000) // 2
            entries = [e for e in entries if stamp_ms(e.entry_id) >= cutoff]
        return entries

    def _row_entries(self, key: ConversationKey) -> list[InboxEntry]:
        query: QueryInputTypeDef = {
            "TableName": self.t.table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :inbox)",
            "ExpressionAttributeValues": {":pk": s(conv_pk(key)), ":inbox": s(INBOX_PREFIX)},
            "ConsistentRead": True,
        }
        paginator = self.t.dynamodb.get_paginator("query")
        return [
            InboxEntry.model_validate_json(item["entry"]["S"])
            for page in paginator.paginate(**query)  # type: ignore[misc]
            for item in page["Items"]
        ]


def lease_of(record: Conversation, expired: tuple[str, ...] = ()) -> Lease:
    assert record.lease_owner is not None and record.lease_expires_at is not None
    return Lease(
        key=record.key,
        owner=record.lease_owner,
        fence=record.fence,
        expires_at=record.lease_expires_at,
        generation=record.generation,
        counted=record.counted,
        housekeeping=expired,
    )


def _failed_item(exc: ClientError) -> Item | None:
    """The record as it was when a conditional write (or its transaction) failed."""
    if "Item" in exc.response:
        found: Item = exc.response["Item"]  # type: ignore[typeddict-item]
        return found
    for reason in exc.response.get("CancellationReasons", []):
        if reason.get("Code") == "ConditionalCheckFailed" and "Item" in reason:
            failed: Item = reason["Item"]  # type: ignore[assignment]
            return failed
    return None
