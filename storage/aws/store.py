"""DynamoDB + S3 backend. Clients come from boto3's standard configuration: credentials,
region and endpoints (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_S3`).

Request pieces live in `expressions`, the key layout in `layout`, session item rows in
`items`, ledger rows in `tools`, error translation in `errors`; this module does the I/O."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from storage.aws import items as session_rows
from storage.aws import tools as ledger_rows
from storage.aws.errors import code, first_failed, reasons, translated
from storage.aws.expressions import Item, Update, Value, n, s, ss
from storage.aws.layout import (
    INBOX_PREFIX,
    ITEM_PREFIX,
    META,
    STATUS_INDEX,
    conv_pk,
    epoch_seconds,
    expired,
    in_generation,
    inbox_sk,
    meta_key,
    ms,
    record_from_item,
    seq_of,
    tool_sk,
)
from storage.base import (
    KEEP,
    TRANSACTION_ACTIONS_LIMIT,
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
    NotFound,
    SessionConflict,
    StorageError,
)
from storage.models import (
    Conversation,
    ConversationKey,
    DeliveryMark,
    InboxEntry,
    Lease,
    Status,
    ToolCallClaim,
    ToolCallRecord,
    ToolCallStatus,
    inbox_stamp,
    stamp_ms,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import QueryInputTypeDef, TransactWriteItemTypeDef
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

    @translated
    def get(self, key: ConversationKey) -> Conversation | None:
        found = self.dynamodb.get_item(TableName=self.table, Key=meta_key(key), ConsistentRead=True)
        item: Item | None = found.get("Item")
        if item is None or expired(item, self.clock()):
            return None
        return record_from_item(item)

    @translated
    def acquire(
        self,
        key: ConversationKey,
        owner: str,
        *,
        status: Status | None = None,
        force: bool = False,
        create: bool = True,
        takeover_from: str | None = None,
    ) -> tuple[Lease, Conversation]:
        for _ in range(2):
            now = self.clock()
            expires = now + self.lease_duration
            update = Update()
            update.increment("fence")
            update.set("lease_owner", s(owner))
            update.set("lease_expires_ms", n(ms(expires)))
            update.set("updated_ms", n(ms(now)))
            if status is not None:
                update.set("conv_status", s(status.value))
            self._initialise(update, key, now)
            update.require(self._live_condition(update, now, create=create))
            if takeover_from is not None:
                update.require(
                    f"{self._lease_free(update, now)} OR "
                    f"#lease_owner = {update.value('dead', s(takeover_from))}"
                )
            elif not force:
                update.require(self._lease_free(update, now))
            try:
                result = self.dynamodb.update_item(
                    TableName=self.table,
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
                    if create and self._forget_expired(key, old):
                        continue
                    raise NotFound(str(key)) from exc
                holder = record_from_item(old)
                if holder.lease_owner == owner and holder.lease_expires_at is not None:
                    return _lease_of(holder), holder  # our own attempt landed; answer was lost
                raise LeaseBusy(str(key), holder.lease_owner, holder.lease_expires_at) from exc
            record = record_from_item(result["Attributes"])
            lease = Lease(
                key=key,
                owner=owner,
                fence=record.fence,
                expires_at=expires,
                generation=record.generation,
            )
            return lease, record
        raise StorageError(f"{key}: its expired record could not be replaced")

    def _initialise(self, update: Update, key: ConversationKey, now: datetime) -> None:
        """Fields a new record starts with (left alone on an existing one)."""
        update.set("conv_key", s(str(key)))
        update.set_if_missing("conv_status", s(Status.IDLE.value))
        for counter in ("next_seq", "session_floor", "inbox_seq"):
            update.set_if_missing(counter, n(0))
        update.set_if_missing("generation", n(ms(now)))
        update.set_if_missing("created_ms", n(ms(now)))
        update.set_if_missing("last_activity_ms", n(ms(now)))
        update.set_if_missing("expires_at", n(epoch_seconds(now + self.state_ttl)))

    def _live_condition(self, update: Update, now: datetime, *, create: bool) -> str:
        alive = f"{update.name('expires_at')} >= {update.value('now_s', n(epoch_seconds(now)))}"
        if create:
            return f"attribute_not_exists(pk) OR {alive}"
        return f"attribute_exists(pk) AND {alive}"

    def _lease_free(self, update: Update, now: datetime) -> str:
        cutoff = update.value("cutoff", n(ms(self.takeover_cutoff(now))))
        return (
            f"attribute_not_exists(pk) OR attribute_not_exists({update.name('lease_owner')}) OR "
            f"{update.name('lease_expires_ms')} < {cutoff}"
        )

    def _forget_expired(self, key: ConversationKey, old: Item) -> bool:
        """Delete a record past its TTL (what DynamoDB's TTL would do, late), so that it can be
        created again as a new generation. False if it changed meanwhile."""
        try:
            self.dynamodb.delete_item(
                TableName=self.table,
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

    @translated
    def renew(self, lease: Lease) -> Lease:
        expires = self.clock() + self.lease_duration
        update = Update()
        update.set("lease_expires_ms", n(ms(expires)))
        update.fenced(lease.fence, lease.owner)
        try:
            self.dynamodb.update_item(
                TableName=self.table,
                Key=meta_key(lease.key),
                **update.expression(),
            )
        except ClientError as exc:
            if code(exc) == "ConditionalCheckFailedException":
                raise LeaseLost(str(lease.key), lease.fence) from exc
            raise
        return lease.model_copy(update={"expires_at": expires})

    def _touch(self, update: Update, now: datetime) -> None:
        update.set("updated_ms", n(ms(now)))
        update.set("last_activity_ms", n(ms(now)))
        update.set("expires_at", n(epoch_seconds(now + self.state_ttl)))

    # -- the atomic write ---------------------------------------------------------------

    @translated
    def apply(self, commit: Commit) -> Committed:
        now = self.clock()
        base_seq, generation = commit.base_seq, commit.lease.generation if commit.lease else None
        writes_items = bool(commit.items) or commit.checkpoint not in (KEEP, None)
        if generation is None or (base_seq is None and writes_items):
            # One read; the runtime passes both (the lease knows the generation).
            record = self.get(commit.key)
            generation = record.generation if record else ms(now)
            if base_seq is None and writes_items:
                base_seq = record.next_seq if record else 0
        room = TRANSACTION_ACTIONS_LIMIT - 1 - len(commit.consume)
        rows = session_rows.item_rows(
            commit.key,
            generation,
            commit.items,
            base_seq or 0,
            max_rows=min(room, TRANSACTION_ITEM_LIMIT),
            expires=now + self.state_ttl,
            put_blob=self._put_blob_once,
        )
        update = self._commit_update(commit, base_seq, len(commit.items), generation, now)
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
                Key=meta_key(commit.key),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **update.expression(),
            )
        except ClientError as exc:
            if code(exc) != "ConditionalCheckFailedException":
                raise
            old: Item | None = exc.response.get("Item")  # type: ignore[assignment]
            failure = self._explain(commit, base_seq, old)
            if failure is not None:
                raise failure from exc

    def _transact_commit(
        self, commit: Commit, base_seq: int | None, update: Update, rows: list[Item]
    ) -> None:
        actions: list[TransactWriteItemTypeDef] = [
            {"Update": update.as_update(self.table, meta_key(commit.key))}
        ]
        actions += [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": item_row,
                    "ConditionExpression": "attribute_not_exists(sk)",
                }
            }
            for item_row in rows
        ]
        actions += [
            {
                "Delete": {
                    "TableName": self.table,
                    "Key": {"pk": s(conv_pk(commit.key)), "sk": s(inbox_sk(entry_id))},
                    "ConditionExpression": "attribute_exists(sk)",
                }
            }
            for entry_id in commit.consume
        ]
        try:
            # The token makes boto3's retry of a write whose answer was lost a no-op.
            self.dynamodb.transact_write_items(
                TransactItems=actions, ClientRequestToken=commit.token[:36]
            )
        except ClientError as exc:
            if code(exc) == "IdempotentParameterMismatchException":
                return  # this commit, retried with a later clock: its first attempt landed
            if code(exc) != "TransactionCanceledException":
                raise
            found = reasons(exc)
            first = found[0] if found else {}
            if first.get("Code") == "ConditionalCheckFailed":
                failure = self._explain(commit, base_seq, first.get("Item"))
                if failure is None:
                    return
                raise failure from exc
            if any(r.get("Code") == "ConditionalCheckFailed" for r in found[1:]):
                raise SessionConflict(f"{commit.key}: rows exist or inbox entries gone") from exc
            raise

    def _commit_update(
        self,
        commit: Commit,
        base_seq: int | None,
        count: int,
        generation: int,
        now: datetime,
    ) -> Update:
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
            update.set_if_missing("last_activity_ms", n(ms(now)))
            update.set_if_missing("expires_at", n(epoch_seconds(now + self.state_ttl)))
            update.set_if_missing("generation", n(generation))
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
        self._delivery(update, commit)
        if commit.checkpoint is not KEEP:
            if commit.checkpoint is None:
                update.remove("checkpoint")
                update.set("checkpoint_version", n(0))
            else:
                assert not isinstance(commit.checkpoint, _Keep)
                pointer = commit.checkpoint.model_copy(
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

    def _delivery(self, update: Update, commit: Commit) -> None:
        mark = commit.delivery
        if mark is None and commit.delivered:
            if isinstance(commit.checkpoint, _Keep):
                # Everything of whatever checkpoint is current: no read needed.
                update.names["#checkpoint_version"] = "checkpoint_version"
                update.sets.append(
                    f"{update.name('delivered_version')} = "
                    "if_not_exists(#checkpoint_version, :zero_version)"
                )
                update.values[":zero_version"] = n(0)
                mark = DeliveryMark(version=0)
                for attribute in ("delivered_count", "delivery_retry_ms", "delivery_error"):
                    update.remove(attribute)
                update.set("delivery_attempts", n(0))
                return
            mark = DeliveryMark(version=commit.checkpoint.version if commit.checkpoint else 0)
        if mark is None:
            return
        update.set("delivered_version", n(mark.version))
        update.set("delivery_attempts", n(mark.attempts))
        for attribute, value in (
            ("delivered_count", None if mark.count is None else n(mark.count)),
            ("delivery_retry_ms", None if mark.retry_at is None else n(ms(mark.retry_at))),
            ("delivery_error", None if mark.error is None else s(mark.error)),
        ):
            if value is None:
                update.remove(attribute)
            else:
                update.set(attribute, value)

    def _explain(self, commit: Commit, base_seq: int | None, old: Item | None) -> Exception | None:
        """Name the condition that failed, from the item as it was; None when the item shows
        that this very write already landed (a retry after its answer was lost)."""
        record = record_from_item(old) if old and "conv_key" in old else None
        lease = commit.lease
        if lease and record is not None and record.fence == lease.fence:
            pointer = commit.checkpoint
            if (
                not isinstance(pointer, _Keep)
                and pointer is not None
                and record.checkpoint
                and record.checkpoint.object_key == pointer.object_key
            ):
                return None
            if commit.release and record.lease_owner is None and not commit.items:
                return None
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

    def _rows_newest_first(self, key: ConversationKey, page_size: int | None) -> Iterator[Item]:
        """META first (it sorts after every ITEM#), then item rows, newest first."""
        query: QueryInputTypeDef = {
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

    def _current_rows(
        self, key: ConversationKey, page_size: int | None
    ) -> tuple[Item | None, Iterator[Item]]:
        """The live META and an iterator over its generation's item rows above the floor,
        newest first. (None, empty) when the record is missing or expired."""
        rows = self._rows_newest_first(key, page_size)
        meta = next(rows, None)
        if meta is None or meta["sk"]["S"] != META or expired(meta, self.clock()):
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

    @translated
    def read_items(self, key: ConversationKey, limit: int | None = None) -> SessionPage:
        meta, rows = self._current_rows(key, None if limit is None else limit + 1)
        if meta is None:
            return SessionPage(items=[], next_seq=0)
        newest_first: list[str] = []
        for item_row in rows:
            if limit is not None and len(newest_first) >= limit:
                break
            newest_first.extend(reversed(session_rows.expand(item_row, self._get_blob)))
        if limit is not None:
            newest_first = newest_first[: max(limit, 0)]
        return SessionPage(items=newest_first[::-1], next_seq=int(meta["next_seq"]["N"]))

    @translated
    def pop_item(self, key: ConversationKey, lease: Lease | None = None) -> str | None:
        for _ in range(10):
            meta, rows = self._current_rows(key, 2)
            if lease and (meta is None or not _held_by(meta, lease)):
                raise LeaseLost(str(key), lease.fence)
            item_row = next(rows, None)
            if meta is None or item_row is None:
                return None
            items = session_rows.expand(item_row, self._get_blob)
            actions: list[TransactWriteItemTypeDef] = [self._floor_check(key, meta, lease)]
            if "count" in item_row and len(items) > 1:
                actions.append(self._shrink_batch(item_row, len(items)))
            else:
                actions.append(
                    {
                        "Delete": {
                            "TableName": self.table,
                            "Key": {"pk": item_row["pk"], "sk": item_row["sk"]},
                            "ConditionExpression": "attribute_exists(sk)",
                        }
                    }
                )
            try:
                self.dynamodb.transact_write_items(TransactItems=actions)
            except ClientError as exc:
                if code(exc) != "TransactionCanceledException":
                    raise
                if lease and first_failed(exc):
                    raise LeaseLost(str(key), lease.fence) from exc
                continue  # a concurrent pop or clear won: look again
            if not items:
                continue  # the row was a gap (its blob expired): it is gone now, look again
            return items[-1]
        raise SessionConflict(f"{key}: pop kept losing to concurrent writers")

    def _floor_check(
        self, key: ConversationKey, meta: Item, lease: Lease | None
    ) -> TransactWriteItemTypeDef:
        update = Update()
        update.require(
            f"{update.name('session_floor')} = {update.value('floor', meta['session_floor'])}"
        )
        if lease:
            update.fenced(lease.fence, lease.owner)
        return {"ConditionCheck": update.as_condition_check(self.table, meta_key(key))}

    def _shrink_batch(self, item_row: Item, count: int) -> TransactWriteItemTypeDef:
        return {
            "Update": {
                "TableName": self.table,
                "Key": {"pk": item_row["pk"], "sk": item_row["sk"]},
                "UpdateExpression": "SET #count = :new",
                "ConditionExpression": "#count = :old",
                "ExpressionAttributeNames": {"#count": "count"},
                "ExpressionAttributeValues": {":new": n(count - 1), ":old": n(count)},
            }
        }

    @translated
    def clear_items(self, key: ConversationKey, lease: Lease | None = None) -> None:
        update = Update()
        update.sets.append("#session_floor = #next_seq")
        update.names |= {"#session_floor": "session_floor", "#next_seq": "next_seq"}
        update.require("attribute_exists(pk)")
        if lease:
            update.fenced(lease.fence, lease.owner)
        try:
            self.dynamodb.update_item(
                TableName=self.table,
                Key=meta_key(key),
                **update.expression(),
            )
        except ClientError as exc:
            if code(exc) != "ConditionalCheckFailedException":
                raise
            if lease:
                raise LeaseLost(str(key), lease.fence) from exc
            return
        # The floor already hides the rows; deleting them is only housekeeping.
        record = self.get(key)
        generation = record.generation if record else 0
        rows = [
            r
            for r in self._rows_newest_first(key, None)
            if r["sk"]["S"] != META and in_generation(r["sk"]["S"], generation)
        ]
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

    @translated
    def enqueue(
        self,
        key: ConversationKey,
        event_id: str,
        payload: str,
        *,
        create: bool = True,
        participant: str | None = None,
        token: str | None = None,
    ) -> bool:
        token = (token or uuid.uuid4().hex)[:36]
        for _ in range(2):
            now = self.clock()
            entry = InboxEntry(
                entry_id=f"{inbox_stamp(now)}#{event_id}",
                event_id=event_id,
                payload=payload,
                received_at=now,
            )
            update = Update()
            update.increment("inbox_seq")
            update.set("conv_status", s(Status.RUNNING.value))
            update.set_if_missing("fence", n(0))
            self._touch(update, now)
            self._initialise(update, key, now)
            if participant:
                update.add_to_set("participants", ss([participant]))
            update.require(self._live_condition(update, now, create=create))
            inbox_row: Item = {
                "pk": s(conv_pk(key)),
                "sk": s(inbox_sk(entry.entry_id)),
                "entry": s(entry.model_dump_json()),
                "expires_at": n(epoch_seconds(now + self.state_ttl)),
            }
            actions: list[TransactWriteItemTypeDef] = [
                {"Put": self._event_put(event_id, now)},
                {"Put": {"TableName": self.table, "Item": inbox_row}},
                {"Update": update.as_update(self.table, meta_key(key))},
            ]
            try:
                self.dynamodb.transact_write_items(TransactItems=actions, ClientRequestToken=token)
            except ClientError as exc:
                if code(exc) == "IdempotentParameterMismatchException":
                    return True  # an earlier attempt with this token (and its own clock) landed
                if code(exc) != "TransactionCanceledException":
                    raise
                found = reasons(exc)
                if first_failed(exc):
                    return False  # the event id was claimed before: a retried delivery
                meta = found[2] if len(found) > 2 else {}
                if meta.get("Code") != "ConditionalCheckFailed":
                    raise
                old: Item | None = meta.get("Item")
                if (
                    old is not None
                    and expired(old, now)
                    and create
                    and self._forget_expired(key, old)
                ):
                    token = uuid.uuid4().hex  # a different write now
                    continue
                raise NotFound(str(key)) from exc
            return True
        raise StorageError(f"{key}: its expired record could not be replaced")

    @translated
    def read_inbox(self, key: ConversationKey, generation: int | None = None) -> list[InboxEntry]:
        query: QueryInputTypeDef = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :inbox)",
            "ExpressionAttributeValues": {":pk": s(conv_pk(key)), ":inbox": s(INBOX_PREFIX)},
            "ConsistentRead": True,
        }
        entries = [
            InboxEntry.model_validate_json(item["entry"]["S"])
            for page in self._pages(query)
            for item in page["Items"]
        ]
        if generation:
            # Left behind by an expired record: every message of that record arrived at
            # least a TTL before it expired and this generation began. (A message kept a
            # moment before the record's creation by another replica is this generation's.)
            cutoff = generation - int(self.state_ttl.total_seconds() * 1000) // 2
            entries = [e for e in entries if stamp_ms(e.entry_id) >= cutoff]
        return entries

    # -- ledgers ------------------------------------------------------------------------

    @translated
    def claim_event(self, event_id: str) -> bool:
        try:
            self.dynamodb.put_item(**self._event_put(event_id, self.clock()))
        except ClientError as exc:
            if code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def _event_put(self, event_id: str, now: datetime) -> Any:
        seconds = epoch_seconds(now)
        return {
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

    @translated
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
        item = ledger_rows.started_row(
            record, lease.generation, now + self.state_ttl, self._put_blob_once
        )
        actions: list[TransactWriteItemTypeDef] = [
            self._lease_check(lease),
            {
                "Put": {
                    "TableName": self.table,
                    "Item": item,
                    "ConditionExpression": "attribute_not_exists(sk)",
                }
            },
        ]
        try:
            self.dynamodb.transact_write_items(
                TransactItems=actions, ClientRequestToken=uuid.uuid4().hex
            )
        except ClientError as exc:
            if code(exc) != "TransactionCanceledException":
                raise
            if first_failed(exc):
                raise LeaseLost(str(lease.key), lease.fence) from exc
            existing = self.get_tool_call(lease.key, call_id, lease.generation)
            if existing is None:
                raise
            return ToolCallClaim(record=existing, created=False)
        return ToolCallClaim(record=record, created=True)

    @translated
    def complete_tool_call(self, lease: Lease, call_id: str, output: str) -> ToolCallRecord:
        now = self.clock()
        update = ledger_rows.completion(
            lease.key, call_id, output, now, now + self.state_ttl, self._put_blob_once
        )
        key = {"pk": s(conv_pk(lease.key)), "sk": s(tool_sk(lease.generation, call_id))}
        actions: list[TransactWriteItemTypeDef] = [
            self._lease_check(lease),
            {"Update": update.as_update(self.table, key)},
        ]
        try:
            self.dynamodb.transact_write_items(
                TransactItems=actions, ClientRequestToken=uuid.uuid4().hex
            )
        except ClientError as exc:
            if code(exc) != "TransactionCanceledException":
                raise
            if first_failed(exc):
                raise LeaseLost(str(lease.key), lease.fence) from exc
            existing = self.get_tool_call(lease.key, call_id, lease.generation)
            if (
                existing is not None
                and existing.status is ToolCallStatus.COMPLETED
                and existing.output == output
            ):
                return existing  # our own earlier attempt landed
            raise StorageError(f"tool call {call_id} is not started in {lease.key}") from exc
        found = self.get_tool_call(lease.key, call_id, lease.generation)
        assert found is not None
        return found

    @translated
    def get_tool_call(
        self, key: ConversationKey, call_id: str, generation: int | None = None
    ) -> ToolCallRecord | None:
        if generation is None:
            record = self.get(key)
            generation = record.generation if record else 0
        found = self.dynamodb.get_item(
            TableName=self.table,
            Key={"pk": s(conv_pk(key)), "sk": s(tool_sk(generation, call_id))},
            ConsistentRead=True,
        )
        item: Item | None = found.get("Item")
        if item is None:
            return None
        return ledger_rows.record_from_row(key, call_id, item, self._get_blob)

    def _lease_check(self, lease: Lease) -> TransactWriteItemTypeDef:
        update = Update()
        update.fenced(lease.fence, lease.owner)
        return {"ConditionCheck": update.as_condition_check(self.table, meta_key(lease.key))}

    # -- operational queries ------------------------------------------------------------

    @translated
    def list_by_status(
        self, status: Status, *, idle_for: timedelta | None = None, limit: int = 100
    ) -> list[Conversation]:
        cutoff = ms(self.clock() - (idle_for or timedelta(0)))
        query: QueryInputTypeDef = {
            "TableName": self.table,
            "IndexName": STATUS_INDEX,
            "KeyConditionExpression": "conv_status = :status AND last_activity_ms <= :cutoff",
            "ExpressionAttributeValues": {":status": s(status.value), ":cutoff": n(cutoff)},
            "ScanIndexForward": True,
            "Limit": limit,
        }
        now = self.clock()
        records: list[Conversation] = []
        for page in self._pages(query):
            records.extend(record_from_item(i) for i in page["Items"] if not expired(i, now))
            if len(records) >= limit:
                break
        return records[:limit]

    @translated
    def count_by_status(self) -> dict[Status, int]:
        counts = {}
        for status in Status:
            query: QueryInputTypeDef = {
                "TableName": self.table,
                "IndexName": STATUS_INDEX,
                "KeyConditionExpression": "conv_status = :status",
                "ExpressionAttributeValues": {":status": s(status.value)},
                "Select": "COUNT",
            }
            counts[status] = sum(page["Count"] for page in self._pages(query))
        return counts

    def _pages(self, query: QueryInputTypeDef) -> Iterator[Any]:
        """Query pages, fetched one at a time as they are consumed (boto3's paginator)."""
        paginator = self.dynamodb.get_paginator("query")
        return iter(paginator.paginate(**query))  # type: ignore[misc]

    # -- blobs --------------------------------------------------------------------------

    @translated
    def _put_blob(self, object_key: str, data: bytes) -> None:
        try:
            self.s3.put_object(Bucket=self.bucket, Key=object_key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            if code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise BlobExists(object_key) from exc
            raise

    @translated
    def _get_blob(self, object_key: str) -> bytes:
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=object_key)["Body"].read()
        except ClientError as exc:
            if code(exc) in ("NoSuchKey", "404"):
                raise CheckpointMissing(object_key, "no such object") from exc
            raise

    @translated
    def _delete_blob(self, object_key: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=object_key)


def _lease_of(record: Conversation) -> Lease:
    assert record.lease_owner is not None and record.lease_expires_at is not None
    return Lease(
        key=record.key,
        owner=record.lease_owner,
        fence=record.fence,
        expires_at=record.lease_expires_at,
        generation=record.generation,
    )


def _held_by(meta: Item, lease: Lease) -> bool:
    owner = meta.get("lease_owner", {}).get("S")
    return int(meta["fence"]["N"]) == lease.fence and owner == lease.owner


__all__ = ["AwsStore", "Value"]
