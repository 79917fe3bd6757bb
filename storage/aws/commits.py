"""The one atomic write every change to a conversation goes through (`Store.apply`).

One UpdateItem on the record when it is alone; one TransactWriteItems (with an idempotency
token) when session rows, ledger rows, row-stored messages, counters or the note of the
conversation on its person's record (`Commit.note`, when this process knows that record)
come with it. Every
action is counted against DynamoDB's limit of 100: session rows beyond what is left go to S3
as one batch blob. A retry whose first attempt landed (its answer was lost) is recognised
and reported as done."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from storage.aws import items as session_rows
from storage.aws.commit_extras import counter_actions, ledger_actions
from storage.aws.errors import code, reasons
from storage.aws.expressions import Item, Update, n, s
from storage.aws.layout import (
    INLINE_INBOX,
    SPILL_SUFFIX,
    STATE_EXPIRES,
    conv_pk,
    epoch_seconds,
    in_row,
    inbox_sk,
    meta_key,
    ms,
    record_from_item,
)
from storage.aws.people import People, Written
from storage.aws.summaries import summary_actions
from storage.aws.tables import Tables
from storage.errors import (
    CheckpointConflict,
    InboxChanged,
    LeaseLost,
    SessionConflict,
    StorageError,
)
from storage.models import DeliveryMark, Status, capped_entry
from storage.people import PersonKey, noting
from storage.writes import (
    KEEP,
    TRANSACTION_ACTIONS_LIMIT,
    TRANSACTION_ITEM_LIMIT,
    Commit,
    Committed,
    _Keep,
    summed_up,
)

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from storage.models import Conversation, ConversationKey


class _ArmedBefore(Exception):
    def __init__(self, positions: set[int]) -> None:
        super().__init__(positions)
        self.positions = positions


class _PersonChanged(Exception):
    """Only the person's item of a noting write had changed since this process saw it."""


@dataclass(frozen=True)
class _Transaction:
    """What one commit's transaction writes: the record's `update`, session `rows`, the
    `extra` actions (counters, summary, armed calls), the inbox rows it consumes and the
    person it notes."""

    commit: Commit
    base_seq: int | None
    update: Update
    rows: list[Item]
    extra: list[TransactWriteItemTypeDef]
    in_rows: list[str]
    note: Written | None


@dataclass
class Commits:
    t: Tables
    get: Callable[[ConversationKey], Conversation | None]
    put_blob: Callable[[str, bytes], None]
    people: People

    def apply(self, commit: Commit) -> Committed:
        now = self.t.clock()
        base_seq, generation = commit.base_seq, commit.lease.generation if commit.lease else None
        writes_items = bool(commit.items) or commit.checkpoint not in (KEEP, None)
        writes_items = writes_items or commit.summary is not None
        if generation is None or (base_seq is None and writes_items):
            # One read; the runtime passes both (the lease knows the generation).
            record = self.get(commit.key)
            generation = record.generation if record else ms(now)
            if base_seq is None and writes_items:
                base_seq = record.next_seq if record else 0
        summed_up(commit, 0, (base_seq or 0) + len(commit.items))
        update = self._record_update(commit, base_seq, len(commit.items), generation, now)
        # The ledger's actions last: a failed one is found by its place from the end.
        extra = counter_actions(self.t, commit, update, now)
        extra += summary_actions(self.t, commit, update, generation, now)
        extra += ledger_actions(self.t, commit, generation, now, self.put_blob)
        in_rows = [e for e in commit.consume if in_row(e)]
        room = TRANSACTION_ACTIONS_LIMIT - 1 - len(extra) - len(in_rows)
        rows = session_rows.item_rows(
            commit.key,
            generation,
            commit.items,
            base_seq or 0,
            max_rows=min(room, TRANSACTION_ITEM_LIMIT),
            expires=self.t.policies.expiry(now),
            put_blob=self.put_blob,
        )
        armed = [call.call_id for call in commit.arm]
        note = None if commit.note is None else self._note(commit.note, commit.key)
        if rows or extra or in_rows or note:
            transaction = _Transaction(commit, base_seq, update, rows, extra, in_rows, note)
            try:
                armed = self._transact_armed(transaction)
            except _PersonChanged:
                assert commit.note is not None
                self.people.forget(commit.note)
                note = None  # the write goes without it; the note follows from a fresh read
                again = replace(commit, token=uuid.uuid4().hex)  # another write: its own token
                armed = self._transact_armed(replace(transaction, commit=again, note=None))
        else:
            self._update(commit, base_seq, update)
        if note is not None:
            self.people.remember(note)
        elif commit.note is not None:
            self._note_alone(commit.note, commit.key)
        checkpoint = commit.checkpoint
        if isinstance(checkpoint, _Keep):
            next_known = None if base_seq is None else base_seq + len(commit.items)
            return Committed(commit.key, next_known, None, commit.status, tuple(armed))
        next_seq = (base_seq or 0) + len(commit.items)
        if checkpoint is not None:
            checkpoint = checkpoint.model_copy(update={"session_seq": next_seq})
        return Committed(commit.key, next_seq, checkpoint, commit.status, tuple(armed))

    def _transact_armed(self, transaction: _Transaction) -> list[str]:
        """The transaction; the calls it recorded as approved."""
        commit, extra = transaction.commit, transaction.extra
        armed = [call.call_id for call in commit.arm]
        try:
            self._transact(transaction)
        except _ArmedBefore as already:
            # A call this commit arms is in the ledger already (it says more): keep it.
            first = len(extra) - len(commit.arm)
            kept = [a for i, a in enumerate(extra) if i not in already.positions]
            armed = [c for i, c in enumerate(armed) if first + i not in already.positions]
            self._transact(replace(transaction, extra=kept))
        return armed

    # -- the person it notes -------------------------------------------------------------

    def _note(self, person: PersonKey, conversation: ConversationKey) -> Written | None:
        """The note as an action of this write, when this process knows the person's item."""
        try:
            return self.people.change_in_transaction(person, noting(conversation))
        except (ValueError, KeyError):  # an item this process cannot read: noted alone
            return None

    def _note_alone(self, person: PersonKey, conversation: ConversationKey) -> None:
        """The note by a write of its own, after the conversation's: best effort (the
        person's list stays as it was), never a failure of the write it came with."""
        try:
            self.people.change(person, noting(conversation))
        except (StorageError, ClientError, BotoCoreError) as exc:  # contention, a fault
            log.warning("%s: their recent conversations were not updated: %s", person, exc)
        except Exception:
            log.warning("%s: their recent conversations were not updated", person, exc_info=True)

    # -- the record ---------------------------------------------------------------------

    def _record_update(
        self,
        commit: Commit,
        base_seq: int | None,
        count: int,
        generation: int,
        now: datetime,
    ) -> Update:
        update = Update()
        if commit.touch:
            self.t.touch(update, now)
        else:
            update.set("updated_ms", n(ms(now)))
        if commit.lease is not None:
            update.fenced(commit.lease.fence, commit.lease.owner)
            for name in commit.lease.housekeeping:  # expired event claims
                update.removes.append(update.name(name))
        else:
            update.set("conv_key", s(str(commit.key)))
            update.set_if_missing("conv_status", s(Status.IDLE.value))
            for counter in ("fence", "session_floor", "inbox_seq"):
                update.set_if_missing(counter, n(0))
            update.set_if_missing("created_ms", n(ms(now)))
            update.set_if_missing("last_activity_ms", n(ms(now)))
            update.set_if_missing(STATE_EXPIRES, n(epoch_seconds(self.t.policies.expiry(now))))
            update.set_if_missing("expires_at", n(epoch_seconds(self.t.policies.record_ttl(now))))
            update.set_if_missing("generation", n(generation))
        if commit.status is not None:
            self.t.set_status(update, commit.key, commit.status, run_by=commit.run_by, now=now)
        if commit.release:
            update.remove("lease_owner")
            update.remove("lease_expires_ms")
            update.remove("stop_by")
        self._consume(update, commit.consume)
        if commit.run_by is not None:
            update.set("run_by", s(commit.run_by))
        if commit.summary is not None:
            update.set("summary_seq", n(commit.summary.through))
        if commit.clear_expiry:
            update.remove("expired_from")
        if commit.clear_stop and not commit.release:
            update.remove("stop_by")
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

    def _consume(self, update: Update, consume: Sequence[str]) -> None:
        """Consumed messages leave the record (or their rows, see `_transact`), and the
        backlog's counters move with them (a retried UpdateItem whose answer was lost may
        count them twice: the counters then err low, which only loosens the limits)."""
        if not consume:
            return
        for entry_id in consume:
            update.removes.append(update.name(INLINE_INBOX + entry_id))
        spilled = sum(entry_id.endswith(SPILL_SUFFIX) for entry_id in consume)
        inline = sum(not in_row(entry_id) for entry_id in consume)
        for counter, count in (
            ("inbox_count", sum(map(capped_entry, consume))),
            ("inbox_rows", spilled),
            ("inbox_inline", inline),
        ):
            if count:
                update.adds.append(f"{update.name(counter)} {update.value(counter, n(-count))}")

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

    # -- writing ------------------------------------------------------------------------

    def _update(self, commit: Commit, base_seq: int | None, update: Update) -> None:
        try:
            self.t.dynamodb.update_item(
                TableName=self.t.table,
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

    def _transact(self, transaction: _Transaction) -> None:
        commit, base_seq, note = transaction.commit, transaction.base_seq, transaction.note
        rows, in_rows = transaction.rows, transaction.in_rows
        actions: list[TransactWriteItemTypeDef] = [
            {"Update": transaction.update.as_update(self.t.table, meta_key(commit.key))}
        ]
        actions += [
            {
                "Put": {
                    "TableName": self.t.table,
                    "Item": item_row,
                    "ConditionExpression": "attribute_not_exists(sk)",
                }
            }
            for item_row in rows
        ]
        actions += [
            {
                "Delete": {
                    "TableName": self.t.table,
                    "Key": {
                        "pk": s(conv_pk(commit.key)),
                        "sk": s(inbox_sk(entry_id)),
                    },
                }
            }
            for entry_id in in_rows
        ]
        actions += transaction.extra
        if note is not None:
            actions.append(note.action)  # last: a failure of its own is told apart
        try:
            # The token makes boto3's retry of a write whose answer was lost a no-op.
            self.t.dynamodb.transact_write_items(
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
            failed = [i for i, r in enumerate(found) if r.get("Code") == "ConditionalCheckFailed"]
            if note is not None and failed == [len(actions) - 1]:
                raise _PersonChanged from exc
            start = 1 + len(rows) + len(in_rows)
            ledger = {i - start for i in failed if i >= start and "Put" in actions[i]}
            if failed and len(ledger) == len(failed):
                raise _ArmedBefore(ledger) from exc
            if failed:
                raise SessionConflict(f"{commit.key}: rows exist or entries are gone") from exc
            raise

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
