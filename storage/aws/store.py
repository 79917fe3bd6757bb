"""DynamoDB + S3 backend. Clients come from boto3's standard configuration: credentials,
region and endpoints (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_S3`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from storage.aws.layout import (
    INBOX_PREFIX,
    ITEM_PREFIX,
    META,
    STATUS_INDEX,
    TOOL_PREFIX,
    Item,
    Update,
    conv_pk,
    item_sk,
    ms,
    n,
    record_from_item,
    s,
    seq_of,
)
from storage.base import (
    INLINE_ITEM_LIMIT,
    KEEP,
    TRANSACTION_BYTES_LIMIT,
    TRANSACTION_ITEM_LIMIT,
    Commit,
    Committed,
    SessionPage,
    Store,
    _Keep,
)
from storage.errors import (
    BlobExists,
    CheckpointConflict,
    CheckpointMissing,
    InboxChanged,
    LeaseBusy,
    LeaseLost,
    SessionConflict,
    SessionItemError,
    StorageError,
)
from storage.models import (
    Conversation,
    ConversationKey,
    InboxEntry,
    Lease,
    Status,
    ToolCallClaim,
    ToolCallRecord,
    ToolCallStatus,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5})


class AwsStore(Store):
    def __init__(self, table: str, bucket: str, **options: Any) -> None:
        super().__init__(**options)
        self.table = table
        self.bucket = bucket
        session = boto3.session.Session()
        self.dynamodb: DynamoDBClient = session.client("dynamodb", config=CLIENT_CONFIG)
        self.s3: S3Client = session.client("s3", config=CLIENT_CONFIG)

    def close(self) -> None:
        self.dynamodb.close()
        self.s3.close()

    # -- records and leases -------------------------------------------------------------

    def get(self, key: ConversationKey) -> Conversation | None:
        found = self.dynamodb.get_item(
            TableName=self.table, Key=_meta_key(key), ConsistentRead=True
        )
        return record_from_item(found["Item"]) if "Item" in found else None

    def acquire(
        self,
        key: ConversationKey,
        owner: str,
        *,
        status: Status | None = None,
        force: bool = False,
    ) -> tuple[Lease, Conversation]:
        now = self.clock()
        expires = now + self.lease_duration
        update = Update()
        fence = update.name("fence")
        update.sets.append(f"{fence} = if_not_exists({fence}, :zero) + :one")
        update.values |= {":zero": n(0), ":one": n(1)}
        update.set("lease_owner", s(owner))
        update.set("lease_expires_ms", n(ms(expires)))
        update.set("conv_key", s(str(key)))
        if status is not None:
            update.set("conv_status", s(status.value))
        else:
            update.set_if_missing("conv_status", s(Status.IDLE.value))
        for counter in ("next_seq", "session_floor", "inbox_seq"):
            update.set_if_missing(counter, n(0))
        update.set_if_missing("created_ms", n(ms(now)))
        self._touch(update, now)
        if not force:
            update.require(
                "attribute_not_exists(pk) OR attribute_not_exists(#lease_owner) OR "
                "#lease_expires_ms < " + update.value("cutoff", n(ms(self.takeover_cutoff(now))))
            )
        try:
            result = self.dynamodb.update_item(
                TableName=self.table,
                Key=_meta_key(key),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **update.expression(),
            )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise
            holder = record_from_item(exc.response["Item"])  # type: ignore[typeddict-item]
            raise LeaseBusy(str(key), holder.lease_owner, holder.lease_expires_at) from exc
        record = record_from_item(result["Attributes"])
        return Lease(key=key, owner=owner, fence=record.fence, expires_at=expires), record

    def renew(self, lease: Lease) -> Lease:
        expires = self.clock() + self.lease_duration
        update = Update()
        update.set("lease_expires_ms", n(ms(expires)))
        update.fenced(lease.fence, lease.owner)
        try:
            self.dynamodb.update_item(
                TableName=self.table, Key=_meta_key(lease.key), **update.expression()
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                raise LeaseLost(str(lease.key), lease.fence) from exc
            raise
        return lease.model_copy(update={"expires_at": expires})

    def _touch(self, update: Update, now: Any) -> None:
        update.set("updated_ms", n(ms(now)))
        update.set("last_activity_ms", n(ms(now)))
        update.set("expires_at", n(int((now + self.state_ttl).timestamp())))

    # -- the atomic write ---------------------------------------------------------------

    def apply(self, commit: Commit) -> Committed:
        base_seq = commit.base_seq
        if base_seq is None and (commit.items or commit.checkpoint not in (KEEP, None)):
            base_seq = self._next_seq(commit.key)  # one read; the runtime passes base_seq
        rows = self._item_rows(commit.key, commit.items, base_seq or 0)
        update = self._commit_update(commit, base_seq, len(commit.items))
        if rows or commit.consume:
            self._transact_commit(commit, base_seq, update, rows)
        else:
            self._update_commit(commit, base_seq, update)
        checkpoint = commit.checkpoint
        if isinstance(checkpoint, _Keep):
            next_known = None if base_seq is None else base_seq + len(commit.items)
            return Committed(commit.key, next_known, None, commit.status)
        next_seq = (base_seq or 0) + len(commit.items)
        if checkpoint is not None:
            checkpoint = checkpoint.model_copy(update={"session_seq": next_seq})
        return Committed(commit.key, next_seq, checkpoint, commit.status)

    def _update_commit(self, commit: Commit, base_seq: int | None, update: Update) -> None:
        try:
            self.dynamodb.update_item(
                TableName=self.table,
                Key=_meta_key(commit.key),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **update.expression(),
            )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise
            old: Item | None = exc.response.get("Item")  # type: ignore[assignment]
            raise self._explain(commit, base_seq, old) from exc

    def _transact_commit(
        self, commit: Commit, base_seq: int | None, update: Update, rows: list[Item]
    ) -> None:
        meta = {
            "Update": {
                "TableName": self.table,
                "Key": _meta_key(commit.key),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                **update.expression(),
            }
        }
        puts = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": row,
                    "ConditionExpression": "attribute_not_exists(sk)",
                }
            }
            for row in rows
        ]
        consumed = [
            {
                "Delete": {
                    "TableName": self.table,
                    "Key": {"pk": s(conv_pk(commit.key)), "sk": s(INBOX_PREFIX + entry_id)},
                    "ConditionExpression": "attribute_exists(sk)",
                }
            }
            for entry_id in commit.consume
        ]
        try:
            self.dynamodb.transact_write_items(TransactItems=[meta, *puts, *consumed])  # type: ignore[list-item]
        except ClientError as exc:
            if _code(exc) != "TransactionCanceledException":
                raise
            reasons: list[Any] = list(exc.response.get("CancellationReasons", []))
            first = reasons[0] if reasons else {}
            if first.get("Code") == "ConditionalCheckFailed":
                raise self._explain(commit, base_seq, first.get("Item")) from exc
            if any(r.get("Code") == "ConditionalCheckFailed" for r in reasons[1:]):
                raise SessionConflict(f"{commit.key}: rows exist or inbox entries gone") from exc
            raise StorageError(f"commit of {commit.key} cancelled: {reasons}") from exc

    def _next_seq(self, key: ConversationKey) -> int:
        record = self.get(key)
        return record.next_seq if record else 0

    def _commit_update(self, commit: Commit, base_seq: int | None, count: int) -> Update:
        now = self.clock()
        update = Update()
        if commit.touch:
            self._touch(update, now)
        else:
            update.set("updated_ms", n(ms(now)))
        if commit.lease is not None:
            update.fenced(commit.lease.fence, commit.lease.owner)
        else:
            update.set("conv_key", s(str(commit.key)))
            update.set_if_missing("conv_status", s(Status.IDLE.value))
            update.set_if_missing("fence", n(0))
            update.set_if_missing("session_floor", n(0))
            update.set_if_missing("created_ms", n(ms(now)))
        if commit.status is not None:
            update.set("conv_status", s(commit.status.value))
        if commit.release:
            update.remove("lease_owner")
            update.remove("lease_expires_ms")
        if base_seq is not None:
            update.set("next_seq", n(base_seq + count))
            guard = f"#next_seq = {update.value('base_seq', n(base_seq))}"
            update.require(
                f"attribute_not_exists(#next_seq) OR {guard}" if base_seq == 0 else guard
            )
        if commit.delivered:
            if isinstance(commit.checkpoint, _Keep):
                update.names["#checkpoint_version"] = "checkpoint_version"
                update.sets.append(
                    f"{update.name('delivered_version')} = "
                    "if_not_exists(#checkpoint_version, :zero_version)"
                )
                update.values[":zero_version"] = n(0)
            else:
                version = commit.checkpoint.version if commit.checkpoint else 0
                update.set("delivered_version", n(version))
        if commit.checkpoint is not KEEP:
            if commit.checkpoint is None:
                update.remove("checkpoint")
                update.set("checkpoint_version", n(0))
            else:
                pointer = commit.checkpoint.model_copy(  # type: ignore[union-attr]
                    update={"session_seq": (base_seq or 0) + count}
                )
                update.set("checkpoint", s(pointer.model_dump_json()))
                update.set("checkpoint_version", n(pointer.version))
        if commit.inbox_seen is not None:
            update.names["#inbox_seq"] = "inbox_seq"
            seen = update.value("inbox_seen", n(commit.inbox_seen))
            update.require(
                f"attribute_not_exists(#inbox_seq) OR #inbox_seq = {seen}"
                if commit.inbox_seen == 0
                else f"#inbox_seq = {seen}"
            )
        if commit.expected_version is not None:
            guard = f"#cpv = {update.value('expected_version', n(commit.expected_version))}"
            update.names["#cpv"] = "checkpoint_version"
            update.require(
                f"attribute_not_exists(#cpv) OR {guard}" if commit.expected_version == 0 else guard
            )
        return update

    def _explain(self, commit: Commit, base_seq: int | None, old: Item | None) -> Exception:
        """Name the condition that failed, from the item as it was."""
        record = record_from_item(old) if old and "conv_key" in old else None
        lease = commit.lease
        if lease and (
            record is None or record.fence != lease.fence or record.lease_owner != lease.owner
        ):
            return LeaseLost(str(commit.key), lease.fence)
        actual = record.checkpoint_version if record else 0
        if commit.expected_version is not None and actual != commit.expected_version:
            return CheckpointConflict(str(commit.key), commit.expected_version, actual)
        if commit.inbox_seen is not None and record and record.inbox_seq != commit.inbox_seen:
            return InboxChanged(f"{commit.key}: inbox at {record.inbox_seq}")
        return SessionConflict(
            f"{commit.key}: items staged at seq {base_seq}, now {record.next_seq if record else 0}"
        )

    # -- session items ------------------------------------------------------------------

    def _item_rows(self, key: ConversationKey, items: Sequence[str], base_seq: int) -> list[Item]:
        """Rows for one atomic append. Oversized items, and batches beyond one transaction,
        go to S3 first (write-once, content-addressed); the rows only point at them."""
        if not items:
            return []
        sizes = [len(item.encode()) for item in items]
        inline_bytes = sum(size for size in sizes if size <= INLINE_ITEM_LIMIT)
        if len(items) > TRANSACTION_ITEM_LIMIT or inline_bytes > TRANSACTION_BYTES_LIMIT:
            blob_key = self._offload(key, base_seq, json.dumps(list(items)).encode(), "batch")
            return [_row(key, base_seq, {"blob_key": s(blob_key), "count": n(len(items))})]
        rows = []
        for offset, (item, size) in enumerate(zip(items, sizes, strict=True)):
            seq = base_seq + offset
            if size > INLINE_ITEM_LIMIT:
                blob_key = self._offload(key, seq, item.encode(), "item")
                rows.append(_row(key, seq, {"blob_key": s(blob_key)}))
            else:
                rows.append(_row(key, seq, {"data": s(item)}))
        return rows

    def _offload(self, key: ConversationKey, seq: int, data: bytes, kind: str) -> str:
        digest = hashlib.sha256(data).hexdigest()
        blob_key = f"items/{key.path}/{seq:012d}-{kind}-{digest}.json"
        self._put_blob_once(blob_key, data)
        return blob_key

    def _expand(self, row: Item) -> list[str]:
        if "data" in row:
            return [row["data"]["S"]]
        blob_key = row["blob_key"]["S"]
        try:
            data = self._get_blob(blob_key)
        except CheckpointMissing as exc:
            raise SessionItemError(f"session blob {blob_key} is missing") from exc
        digest = blob_key.rsplit("-", 1)[-1].removesuffix(".json")
        if hashlib.sha256(data).hexdigest() != digest:
            raise SessionItemError(f"session blob {blob_key} fails its sha256")
        if "count" not in row:
            return [data.decode()]
        batch: list[str] = json.loads(data)
        return batch[: int(row["count"]["N"])]

    def _rows_newest_first(self, key: ConversationKey, page_size: int | None) -> Any:
        """META first (it sorts after every ITEM#), then item rows, newest first."""
        query: dict[str, Any] = {
            "TableName": self.table,
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
        for page in self._pages(query):  # lazily: callers usually stop after the first page
            yield from page["Items"]

    def read_items(self, key: ConversationKey, limit: int | None = None) -> SessionPage:
        rows = self._rows_newest_first(key, None if limit is None else limit + 1)
        meta = next(rows, None)
        if meta is None or meta["sk"]["S"] != META:
            return SessionPage(items=[], next_seq=0)
        floor = int(meta["session_floor"]["N"])
        newest_first: list[str] = []
        for row in rows:
            if limit is not None and len(newest_first) >= limit:
                break
            if seq_of(row["sk"]["S"]) < floor:
                break
            newest_first.extend(reversed(self._expand(row)))
        if limit is not None:
            newest_first = newest_first[: max(limit, 0)]
        return SessionPage(items=newest_first[::-1], next_seq=int(meta["next_seq"]["N"]))

    def pop_item(self, key: ConversationKey, lease: Lease | None = None) -> str | None:
        for _ in range(10):
            rows = self._rows_newest_first(key, 2)
            meta = next(rows, None)
            if lease and (meta is None or not _held_by(meta, lease)):
                raise LeaseLost(str(key), lease.fence)
            row = next(rows, None)
            if meta is None or row is None:
                return None
            if seq_of(row["sk"]["S"]) < int(meta["session_floor"]["N"]):
                return None
            items = self._expand(row)
            actions = [self._floor_check(key, meta, lease)]
            if "count" in row and len(items) > 1:
                actions.append(self._shrink_batch(row, len(items)))
            else:
                actions.append(_delete_existing(self.table, row))
            try:
                self.dynamodb.transact_write_items(TransactItems=actions)
            except ClientError as exc:
                if _code(exc) != "TransactionCanceledException":
                    raise
                if lease and _first_failed(exc):
                    raise LeaseLost(str(key), lease.fence) from exc
                continue  # a concurrent pop or clear won: look again
            return items[-1]
        raise SessionConflict(f"{key}: pop kept losing to concurrent writers")

    def _floor_check(self, key: ConversationKey, meta: Item, lease: Lease | None) -> Any:
        update = Update()
        update.require(f"#session_floor = {update.value('floor', meta['session_floor'])}")
        update.names["#session_floor"] = "session_floor"
        if lease:
            update.fenced(lease.fence, lease.owner)
        expression = update.expression()
        expression.pop("UpdateExpression")
        return {"ConditionCheck": {"TableName": self.table, "Key": _meta_key(key), **expression}}

    def _shrink_batch(self, row: Item, count: int) -> Any:
        return {
            "Update": {
                "TableName": self.table,
                "Key": {"pk": row["pk"], "sk": row["sk"]},
                "UpdateExpression": "SET #count = :new",
                "ConditionExpression": "#count = :old",
                "ExpressionAttributeNames": {"#count": "count"},
                "ExpressionAttributeValues": {":new": n(count - 1), ":old": n(count)},
            }
        }

    def clear_items(self, key: ConversationKey, lease: Lease | None = None) -> None:
        update = Update()
        update.sets.append("#session_floor = #next_seq")
        update.names |= {"#session_floor": "session_floor", "#next_seq": "next_seq"}
        update.require("attribute_exists(pk)")
        if lease:
            update.fenced(lease.fence, lease.owner)
        try:
            self.dynamodb.update_item(
                TableName=self.table, Key=_meta_key(key), **update.expression()
            )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise
            if lease:
                raise LeaseLost(str(key), lease.fence) from exc
            return
        # The floor already hides the rows; deleting them is only housekeeping.
        rows = [row for row in self._rows_newest_first(key, None) if row["sk"]["S"] != META]
        for start in range(0, len(rows), 25):
            chunk = rows[start : start + 25]
            self.dynamodb.batch_write_item(
                RequestItems={
                    self.table: [
                        {"DeleteRequest": {"Key": {"pk": r["pk"], "sk": r["sk"]}}} for r in chunk
                    ]
                }
            )

    # -- inbox --------------------------------------------------------------------------

    def enqueue(self, key: ConversationKey, event_id: str, payload: str) -> bool:
        now = self.clock()
        entry = InboxEntry(
            entry_id=f"{ms(now):015d}#{event_id}",
            event_id=event_id,
            payload=payload,
            received_at=now,
        )
        update = Update()
        seq = update.name("inbox_seq")
        update.sets.append(f"{seq} = if_not_exists({seq}, :zero) + :one")
        update.values |= {":zero": n(0), ":one": n(1)}
        update.set("conv_status", s(Status.RUNNING.value))
        update.set("conv_key", s(str(key)))
        for counter in ("fence", "next_seq", "session_floor"):
            update.set_if_missing(counter, n(0))
        update.set_if_missing("created_ms", n(ms(now)))
        self._touch(update, now)
        actions = [
            self._event_put(event_id, now),
            {
                "Put": {
                    "TableName": self.table,
                    "Item": {
                        "pk": s(conv_pk(key)),
                        "sk": s(INBOX_PREFIX + entry.entry_id),
                        "entry": s(entry.model_dump_json()),
                        "expires_at": n(int((now + self.state_ttl).timestamp())),
                    },
                }
            },
            {"Update": {"TableName": self.table, "Key": _meta_key(key), **update.expression()}},
        ]
        try:
            self.dynamodb.transact_write_items(TransactItems=actions)  # type: ignore[arg-type]
        except ClientError as exc:
            if _code(exc) == "TransactionCanceledException" and _first_failed(exc):
                return False
            raise
        return True

    def read_inbox(self, key: ConversationKey) -> list[InboxEntry]:
        query: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :inbox)",
            "ExpressionAttributeValues": {":pk": s(conv_pk(key)), ":inbox": s(INBOX_PREFIX)},
            "ConsistentRead": True,
        }
        return [
            InboxEntry.model_validate_json(item["entry"]["S"])
            for page in self._pages(query)
            for item in page["Items"]
        ]

    # -- ledgers ------------------------------------------------------------------------

    def claim_event(self, event_id: str) -> bool:
        put = self._event_put(event_id, self.clock())["Put"]
        try:
            self.dynamodb.put_item(**put)
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def _event_put(self, event_id: str, now: datetime) -> dict[str, Any]:
        seconds = int(now.timestamp())
        return {
            "Put": {
                "TableName": self.table,
                "Item": {
                    "pk": s(f"EVENT#{event_id}"),
                    "sk": s("EVENT"),
                    "expires_at": n(seconds + int(self.event_ttl.total_seconds())),
                },
                # TTL deletes late: an expired claim counts as absent.
                "ConditionExpression": "attribute_not_exists(pk) OR expires_at < :now",
                "ExpressionAttributeValues": {":now": n(seconds)},
            }
        }

    def begin_tool_call(
        self, lease: Lease, call_id: str, tool_name: str, arguments: str
    ) -> ToolCallClaim:
        now = self.clock()
        record = ToolCallRecord(
            key=lease.key,
            call_id=call_id,
            tool_name=tool_name,
            arguments=arguments,
            status=ToolCallStatus.STARTED,
            fence=lease.fence,
            started_at=now,
        )
        put = {
            "Put": {
                "TableName": self.table,
                "Item": self._tool_item(record),
                "ConditionExpression": "attribute_not_exists(sk)",
            }
        }
        try:
            self.dynamodb.transact_write_items(
                TransactItems=[self._lease_check(lease), put]  # type: ignore[list-item]
            )
        except ClientError as exc:
            if _code(exc) != "TransactionCanceledException":
                raise
            if _first_failed(exc):
                raise LeaseLost(str(lease.key), lease.fence) from exc
            existing = self.get_tool_call(lease.key, call_id)
            if existing is None:
                raise
            return ToolCallClaim(record=existing, created=False)
        return ToolCallClaim(record=record, created=True)

    def complete_tool_call(self, lease: Lease, call_id: str, output: str) -> ToolCallRecord:
        existing = self.get_tool_call(lease.key, call_id)
        if existing is None or existing.status is not ToolCallStatus.STARTED:
            raise StorageError(f"tool call {call_id} is not started in {lease.key}")
        record = existing.model_copy(
            update={
                "status": ToolCallStatus.COMPLETED,
                "output": output,
                "completed_at": self.clock(),
            }
        )
        put = {
            "Put": {
                "TableName": self.table,
                "Item": self._tool_item(record),
                "ConditionExpression": "#status = :started",
                "ExpressionAttributeNames": {"#status": "status"},
                "ExpressionAttributeValues": {":started": s(ToolCallStatus.STARTED.value)},
            }
        }
        try:
            self.dynamodb.transact_write_items(
                TransactItems=[self._lease_check(lease), put]  # type: ignore[list-item]
            )
        except ClientError as exc:
            if _code(exc) != "TransactionCanceledException":
                raise
            if _first_failed(exc):
                raise LeaseLost(str(lease.key), lease.fence) from exc
            raise StorageError(f"tool call {call_id} completed concurrently") from exc
        return record

    def get_tool_call(self, key: ConversationKey, call_id: str) -> ToolCallRecord | None:
        found = self.dynamodb.get_item(
            TableName=self.table,
            Key={"pk": s(conv_pk(key)), "sk": s(TOOL_PREFIX + call_id)},
            ConsistentRead=True,
        )
        if "Item" not in found:
            return None
        item = found["Item"]
        if "record_blob" in item:
            return ToolCallRecord.model_validate_json(self._get_blob(item["record_blob"]["S"]))
        return ToolCallRecord.model_validate_json(item["record"]["S"])

    def _tool_item(self, record: ToolCallRecord) -> Item:
        text = record.model_dump_json()
        item: Item = {
            "pk": s(conv_pk(record.key)),
            "sk": s(TOOL_PREFIX + record.call_id),
            "status": s(record.status.value),
            "expires_at": n(int((self.clock() + self.state_ttl).timestamp())),
        }
        if len(text.encode()) > INLINE_ITEM_LIMIT:
            digest = hashlib.sha256(text.encode()).hexdigest()
            blob_key = f"tools/{record.key.path}/{record.call_id}-{digest}.json"
            self._put_blob_once(blob_key, text.encode())
            item["record_blob"] = s(blob_key)
        else:
            item["record"] = s(text)
        return item

    def _lease_check(self, lease: Lease) -> Any:
        return {
            "ConditionCheck": {
                "TableName": self.table,
                "Key": _meta_key(lease.key),
                "ConditionExpression": "#fence = :fence AND #lease_owner = :owner",
                "ExpressionAttributeNames": {"#fence": "fence", "#lease_owner": "lease_owner"},
                "ExpressionAttributeValues": {":fence": n(lease.fence), ":owner": s(lease.owner)},
            }
        }

    # -- operational queries ------------------------------------------------------------

    def list_by_status(
        self, status: Status, *, idle_for: timedelta | None = None, limit: int = 100
    ) -> list[Conversation]:
        cutoff = ms(self.clock() - (idle_for or timedelta(0)))
        query: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": STATUS_INDEX,
            "KeyConditionExpression": "conv_status = :status AND last_activity_ms <= :cutoff",
            "ExpressionAttributeValues": {":status": s(status.value), ":cutoff": n(cutoff)},
            "ScanIndexForward": True,
            "Limit": limit,
        }
        records: list[Conversation] = []
        for page in self._pages(query):
            records.extend(record_from_item(item) for item in page["Items"])
            if len(records) >= limit:
                break
        return records[:limit]

    def count_by_status(self) -> dict[Status, int]:
        counts = {}
        for status in Status:
            query: dict[str, Any] = {
                "TableName": self.table,
                "IndexName": STATUS_INDEX,
                "KeyConditionExpression": "conv_status = :status",
                "ExpressionAttributeValues": {":status": s(status.value)},
                "Select": "COUNT",
            }
            counts[status] = sum(page["Count"] for page in self._pages(query))
        return counts

    def _pages(self, query: dict[str, Any]) -> Iterator[Any]:
        """Query pages, fetched one at a time as they are consumed (boto3's paginator)."""
        return iter(self.dynamodb.get_paginator("query").paginate(**query))

    # -- blobs --------------------------------------------------------------------------

    def _put_blob(self, object_key: str, data: bytes) -> None:
        try:
            self.s3.put_object(Bucket=self.bucket, Key=object_key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            if _code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise BlobExists(object_key) from exc
            raise

    def _get_blob(self, object_key: str) -> bytes:
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=object_key)["Body"].read()
        except ClientError as exc:
            if _code(exc) in ("NoSuchKey", "404"):
                raise CheckpointMissing(object_key, "no such object") from exc
            raise

    def _delete_blob(self, object_key: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=object_key)


def _held_by(meta: Item, lease: Lease) -> bool:
    owner = meta.get("lease_owner", {}).get("S")
    return int(meta["fence"]["N"]) == lease.fence and owner == lease.owner


def _meta_key(key: ConversationKey) -> Item:
    return {"pk": s(conv_pk(key)), "sk": s(META)}


def _row(key: ConversationKey, seq: int, body: Item) -> Item:
    return {"pk": s(conv_pk(key)), "sk": s(item_sk(seq)), **body}


def _delete_existing(table: str, row: Item) -> Any:
    return {
        "Delete": {
            "TableName": table,
            "Key": {"pk": row["pk"], "sk": row["sk"]},
            "ConditionExpression": "attribute_exists(sk)",
        }
    }


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _first_failed(exc: ClientError) -> bool:
    reasons: list[Any] = list(exc.response.get("CancellationReasons", []))
    return bool(reasons) and reasons[0].get("Code") == "ConditionalCheckFailed"
