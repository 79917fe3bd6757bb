"""The inbox on aws. Keeping a message, claiming its event id and (when free) taking the
thread is ONE conditional write that returns the whole record, inbox included, while the
thread's backlog is small; a busy thread's further messages go to rows (one transaction
each), so that the record, and the cost of each keep, stays flat however long the backlog
(see `layout`). A record whose state expired is brought back by the next keep
(`expired.revive`). Messages refused at the backlog cap stay on the record until the thread
has been told: the first few named in `rf:<event id>` attributes (each a `Refusal`'s JSON),
the rest counted in `refused_more`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from storage.aws.errors import code
from storage.aws.expired import forget_expired, revive
from storage.aws.expressions import Item, Update, n, s, ss
from storage.aws.inbox import generation_cutoff, row_entries
from storage.aws.layout import (
    CLAIM_PREFIX,
    INLINE_INBOX,
    LEGACY_CLAIM,
    META,
    REFUSED_ATTRIBUTE,
    SPILL_SUFFIX,
    claim_digest,
    claim_sets,
    claim_sk,
    claimed,
    conv_pk,
    epoch_seconds,
    expired,
    expired_claims,
    gone,
    in_row,
    inbox_sk,
    inline_entries,
    meta_key,
    ms,
    record_from_item,
)
from storage.aws.records import Records
from storage.aws.summaries import renewal_due
from storage.aws.tables import Tables
from storage.errors import NotFound, StorageError
from storage.models import (
    REFUSAL_TEXT,
    REFUSALS_NAMED,
    ConversationKey,
    InboxEntry,
    Lease,
    Refusal,
    Status,
    inbox_entry_id,
    stamp_ms,
)
from storage.writes import KeepRequest, KeepResult

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

CONDITION_FAILED = ("ConditionalCheckFailedException", "TransactionCanceledException")
INLINE_ENTRY_LIMIT = 4_000  # bytes of one queued message kept in the record itself
INLINE_ENTRIES = 4  # queued messages the record holds at most; the rest go to rows
INLINE_CLAIMS = 64  # claims a period's set in the record holds before keeps go to rows
KEEP_ATTEMPTS = 5
REFUSED = "refused:"  # + the keep's token: the claim row of a message refused at the cap


class Keeps:
    def __init__(self, tables: Tables, records: Records) -> None:
        self.t = tables
        self.records = records
        self.hints = Hints()

    def keep(self, request: KeepRequest) -> KeepResult:
        token = request.token or uuid.uuid4().hex
        now = self.t.clock()
        take = request.owner is not None and not self.hints.held(request.key, now)
        spill = len(request.payload.encode()) > INLINE_ENTRY_LIMIT or self.hints.spilling(
            request.key, now
        )
        for attempt in range(KEEP_ATTEMPTS):
            now = self.t.clock()
            suffix = SPILL_SUFFIX if spill else ""
            entry = InboxEntry(
                entry_id=inbox_entry_id(now, request.event_id, capped=request.capped) + suffix,
                event_id=request.event_id,
                payload=request.payload,
                received_at=now,
                token=token,
            )
            update = Update()
            if take:
                assert request.owner is not None
                self.records.take(update, request.owner, now, keep_stop=bool(request.stop_by))
                update.require(self.t.lease_free(update, now))
            self._keep_update(
                update,
                request.key,
                entry,
                now,
                create=request.create,
                participant=request.participant,
                capped=request.capped,
            )
            if request.stop_by:
                update.set("stop_by", s(request.stop_by))
            try:
                item = None
                if spill:
                    self._keep_in_row(request.key, entry, update, f"{token[:30]}-{attempt}")
                else:
                    item = self._keep_inline(request.key, update, returned=take)
            except ClientError as exc:
                if code(exc) == "IdempotentParameterMismatchException":
                    return KeepResult(kept=True)  # our own attempt landed; its answer was lost
                if code(exc) not in CONDITION_FAILED:
                    raise
                claim = _failed_claim(exc)
                if claim is not None:  # the event's claim row: a duplicate, or our own retry
                    return KeepResult(kept=claim.get("token", {}).get("S") == token)
                old = _failed_item(exc)
                if old is None:
                    if request.create:
                        continue  # created meanwhile by another writer: look again
                    raise NotFound(str(request.key)) from exc
                if gone(old, now):  # not even a tombstone: a new conversation
                    if request.create and forget_expired(self.t, request.key, old):
                        continue
                    raise NotFound(str(request.key)) from exc
                if expired(old, now):
                    revive(self.t, request.key, old, now)  # (or someone else did): keep into it
                    continue
                if claimed(old, request.event_id, now, self.t.policies.claim_ttl):
                    # Our own earlier attempt (same token) whose answer was lost is a keep;
                    # anything else with this event id is a duplicate delivery.
                    mine = any(
                        e.event_id == request.event_id and e.token == token
                        for e in inline_entries(old)[0]
                    )
                    return KeepResult(kept=mine)
                if request.capped and _number(old, "inbox_count") >= self.t.policies.backlog_limit:
                    refusal = Refusal(
                        event_id=request.event_id,
                        user=request.participant or "",
                        text=request.refusal_text[:REFUSAL_TEXT],
                        at=now,
                    )
                    return self._refuse(request.key, entry, token, refusal, old)
                self.hints.note(old)
                if take and not _lease_free(old, self.t.policies.takeover_cutoff(now)):
                    take = False  # the thread is busy: keep only; its holder will serve it
                    continue
                if not spill:
                    spill = True  # the record holds all it may: this one goes to a row
                    continue
                raise
            if not take:
                return KeepResult(kept=True)
            self.hints.taken(request.key)
            if item is None:  # written in a transaction: nothing came back, so read it
                record = self.records.get(request.key)
                if record is not None and record.lease_owner == request.owner:
                    return KeepResult(kept=True, lease=Lease.held_in(record), record=record)
                return KeepResult(kept=True)
            record = record_from_item(item, with_inbox=True)
            due = renewal_due(self.t, item, now)
            lease = Lease.held_in(record, expired_claims(item, now), summary_due=due)
            return KeepResult(kept=True, lease=lease, record=record)
        raise StorageError(f"{request.key}: keeping a message kept losing to concurrent writers")

    def _keep_update(
        self,
        update: Update,
        key: ConversationKey,
        entry: InboxEntry,
        now: datetime,
        *,
        create: bool,
        participant: str | None,
        capped: bool,
    ) -> None:
        """What every keep writes to the record, and the conditions of both ways to keep:
        live, under the backlog cap (unless it is not `capped`: then it is not counted
        either), the event not claimed in the record."""
        update.increment("inbox_seq")
        self.t.set_status(update, key, Status.RUNNING)
        self.t.touch(update, now)
        self.t.initialise(update, key, now)
        if participant:
            update.add_to_set("participants", ss([participant]))
            # The first message names the run's starter; later ones never (the holder's
            # commits do): a reply kept while a run waits is not its starter.
            update.set_if_missing("run_by", s(participant))
        update.require(self.t.live(update, now, create=create))
        if capped:
            update.add_to_set("inbox_count", n(1))
            count = update.name("inbox_count")
            cap = update.value("cap", n(self.t.policies.backlog_limit))
            update.require(f"attribute_not_exists({count}) OR {count} < {cap}")
        current, previous, upcoming = claim_sets(now, self.t.policies.claim_ttl)
        digest = update.value("claim", s(claim_digest(entry.event_id)))
        update.require(
            f"NOT contains({update.name(current)}, {digest}) AND "
            f"NOT contains({update.name(previous)}, {digest})"
        )
        # A claim written before the sets (by the previous version, within its claim_ttl).
        update.names["#legacy_claim"] = LEGACY_CLAIM + entry.event_id
        over = update.value("now_claim", n(epoch_seconds(now)))
        update.require(f"attribute_not_exists(#legacy_claim) OR #legacy_claim < {over}")
        if in_row(entry.entry_id):
            update.add_to_set("inbox_rows", n(1))
            until = now + self.t.policies.claim_ttl + self.t.policies.lease_skew
            update.set("spill_until", n(epoch_seconds(until) + 1))
            return
        # In the record: while there is room, and no claim may live in a row.
        update.add_to_set("inbox_inline", n(1))
        update.names["#entry"] = INLINE_INBOX + entry.entry_id
        update.values[":entry"] = s(entry.model_dump_json())
        update.sets.append("#entry = :entry")
        update.add_to_set(current, ss([claim_digest(entry.event_id)]))
        update.remove(upcoming)
        inline, spill_until = update.name("inbox_inline"), update.name("spill_until")
        room = update.value("inline_room", n(INLINE_ENTRIES))
        claims = update.value("claims_room", n(INLINE_CLAIMS))
        update.require(f"attribute_not_exists({inline}) OR {inline} < {room}")
        this_period = update.name(current)
        update.require(f"attribute_not_exists({this_period}) OR size({this_period}) < {claims}")
        update.require(f"attribute_not_exists({spill_until}) OR {spill_until} < {over}")

    def _keep_inline(self, key: ConversationKey, update: Update, *, returned: bool) -> Item | None:
        """One UpdateItem; the record comes back when the same write took the thread."""
        result = self.t.dynamodb.update_item(
            TableName=self.t.table,
            Key=meta_key(key),
            ReturnValues="ALL_NEW" if returned else "NONE",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
            **update.expression(),
        )
        found: Item | None = result.get("Attributes")
        return found

    def _keep_in_row(
        self, key: ConversationKey, entry: InboxEntry, update: Update, token: str
    ) -> None:
        """The message in its own row and its claim in another, in one transaction with the
        record's update: the record does not grow. Returns nothing (a transaction can't)."""
        claim_row: Item = {
            "pk": s(conv_pk(key)),
            "sk": s(claim_sk(entry.event_id)),
            "token": s(entry.token),
            "expires_at": n(epoch_seconds(entry.received_at + self.t.policies.claim_ttl) + 1),
        }
        actions: list[TransactWriteItemTypeDef] = [
            {"Update": update.as_update(self.t.table, meta_key(key))},
            {
                "Put": {
                    "TableName": self.t.table,
                    "Item": {
                        "pk": s(conv_pk(key)),
                        "sk": s(inbox_sk(entry.entry_id)),
                        "entry": s(entry.model_dump_json()),
                        "expires_at": n(epoch_seconds(self.t.policies.expiry(entry.received_at))),
                    },
                }
            },
            {
                "Put": {
                    "TableName": self.t.table,
                    "Item": claim_row,
                    "ConditionExpression": "attribute_not_exists(sk) OR expires_at < :now",
                    "ExpressionAttributeValues": {":now": n(epoch_seconds(entry.received_at))},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
        ]
        self.t.dynamodb.transact_write_items(TransactItems=actions, ClientRequestToken=token)

    def _refuse(
        self, key: ConversationKey, entry: InboxEntry, token: str, refusal: Refusal, old: Item
    ) -> KeepResult:
        """The backlog is full: the message is not kept, but its event is claimed (a claim
        row, and the thread's keeps go to rows meanwhile, where claim rows are checked), so
        that another delivery of it (a mention's `message` and `app_mention` events) is a
        duplicate, not kept after the thread was told it was not taken. A claim row already
        there: a duplicate (or this keep's own earlier refusal, whose answer was lost). The
        same write records the refusal (`record_refusal`) until the thread is told."""
        now = entry.received_at
        update = Update()
        until = now + self.t.policies.claim_ttl + self.t.policies.lease_skew
        update.set("spill_until", n(epoch_seconds(until) + 1))
        update.require(f"attribute_exists({update.name('pk')})")
        named = record_refusal(update, refusal, old)
        mine = s(f"{REFUSED}{token}")
        claim_row: Item = {
            "pk": s(conv_pk(key)),
            "sk": s(claim_sk(entry.event_id)),
            "token": mine,  # never a keep's own token: a retried keep is not "kept"
            "expires_at": n(epoch_seconds(now + self.t.policies.claim_ttl) + 1),
        }
        actions: list[TransactWriteItemTypeDef] = [
            {"Update": update.as_update(self.t.table, meta_key(key))},
            {
                "Put": {
                    "TableName": self.t.table,
                    "Item": claim_row,
                    "ConditionExpression": "attribute_not_exists(sk) OR expires_at < :now",
                    "ExpressionAttributeValues": {":now": n(epoch_seconds(now))},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
        ]
        try:
            self.t.dynamodb.transact_write_items(
                TransactItems=actions, ClientRequestToken=f"{token[:28]}-refused"
            )
        except ClientError as exc:
            if code(exc) not in (*CONDITION_FAILED, "IdempotentParameterMismatchException"):
                raise
            claim = _failed_claim(exc)
            if claim is not None and claim.get("token") != mine:
                return KeepResult(kept=False)  # a duplicate: its first delivery decided
        return KeepResult(kept=False, refused=True, named=named)

    def read(
        self, key: ConversationKey, generation: int | None, limit: int | None
    ) -> list[InboxEntry]:
        found = self.t.dynamodb.get_item(
            TableName=self.t.table, Key=meta_key(key), ConsistentRead=True
        )
        item: Item | None = found.get("Item")
        if item is None:
            return []
        cutoff = generation_cutoff(self.t, generation)
        entries, in_rows = inline_entries(item)
        if in_rows:  # the oldest `limit` rows are all the merge below can need
            rows = row_entries(self.t, key, cutoff, limit)
            entries = sorted(entries + rows, key=lambda e: e.entry_id)
        if cutoff:
            entries = [e for e in entries if stamp_ms(e.entry_id) >= cutoff]
        return entries if limit is None else entries[:limit]

    def refusals_told(self, key: ConversationKey, event_ids: Sequence[str], counted: int) -> None:
        """Remove the refusals named by `event_ids`, and lower the count by `counted`: one
        write that no concurrent refusal makes fail (an ADD), unless the count is below
        `counted` (told twice): then only the names go. A record that is gone has nothing
        left to tell."""
        for lower in (counted > 0, False):
            update = Update()
            update.require(f"attribute_exists({update.name('pk')})")
            for event_id in dict.fromkeys(event_ids):
                update.remove(REFUSED_ATTRIBUTE + event_id)
            if lower:
                count = update.name("refused_more")
                update.require(f"{count} >= {update.value('told', n(counted))}")
                update.add_to_set("refused_more", n(-counted))
            if not update.removes and not update.adds:
                return
            try:
                self.t.dynamodb.update_item(
                    TableName=self.t.table, Key=meta_key(key), **update.expression()
                )
                return
            except ClientError as exc:
                if code(exc) != "ConditionalCheckFailedException":
                    raise


class Hints:
    """What this process saw of busy threads, until it stops being true, so that a keep
    does not first try a conditional write that would fail (and cost as much as one that
    succeeds): threads held by another process (until their lease's expiry: the keep does
    not try to take them), and threads whose claims live in rows (until `spill_until`: the
    keep goes to a row at once). Hints only: a thread released early is taken by `serve`
    instead; a row costs a little more than the record."""

    LIMIT = 10_000

    def __init__(self) -> None:
        self._held: dict[ConversationKey, datetime] = {}
        self._spilling: dict[ConversationKey, datetime] = {}

    def note(self, old: Item) -> None:
        record = record_from_item(old)
        self._remember(self._held, record.key, record.lease_expires_at)
        until = _number(old, "spill_until")
        if until:
            self._remember(self._spilling, record.key, datetime.fromtimestamp(until, tz=UTC))

    def held(self, key: ConversationKey, now: datetime) -> bool:
        until = self._held.get(key)
        return until is not None and until >= now

    def spilling(self, key: ConversationKey, now: datetime) -> bool:
        until = self._spilling.get(key)
        return until is not None and until >= now

    def taken(self, key: ConversationKey) -> None:
        self._held.pop(key, None)

    def _remember(
        self, hints: dict[ConversationKey, datetime], key: ConversationKey, until: datetime | None
    ) -> None:
        if until is None:
            return
        if len(hints) >= self.LIMIT:
            hints.clear()
        hints[key] = until


def record_refusal(update: Update, refusal: Refusal, old: Item) -> bool:
    """Add `refusal` to the write that refuses its message; True when it is named (the
    record, as `old` shows it, names fewer than `REFUSALS_NAMED`), False when only counted.
    `inbox_seq` moves, so that the holder's release sees it."""
    named = sum(1 for name in old if name.startswith(REFUSED_ATTRIBUTE)) < REFUSALS_NAMED
    if named:
        attribute = update.name(REFUSED_ATTRIBUTE + refusal.event_id)
        update.sets.append(f"{attribute} = {update.value('refusal', s(refusal.model_dump_json()))}")
    else:
        update.add_to_set("refused_more", n(1))
    update.increment("inbox_seq")
    return named


def _failed_item(exc: ClientError) -> Item | None:
    """The record as it was when a conditional write (or its transaction) failed."""
    if "Item" in exc.response:
        found: Item = exc.response["Item"]  # type: ignore[typeddict-item]
        return found
    for reason in exc.response.get("CancellationReasons", []):
        if reason.get("Code") == "ConditionalCheckFailed" and "Item" in reason:
            failed: Item = reason["Item"]  # type: ignore[assignment]
            if failed.get("sk", {}).get("S") == META:
                return failed
    return None


def _failed_claim(exc: ClientError) -> Item | None:
    """The claim row that made a keep's transaction fail (the record's own check passed)."""
    found = exc.response.get("CancellationReasons", [])
    if not found or found[0].get("Code") == "ConditionalCheckFailed":
        return None
    for reason in found:
        item: Item = reason.get("Item") or {}  # type: ignore[assignment]
        if reason.get("Code") == "ConditionalCheckFailed" and item.get("sk", {}).get(
            "S", ""
        ).startswith(CLAIM_PREFIX):
            return item
    return None


def _lease_free(item: Item, cutoff: datetime) -> bool:
    owner = item.get("lease_owner")
    expires = item.get("lease_expires_ms")
    return owner is None or expires is None or int(expires["N"]) < ms(cutoff)


def _number(item: Item, name: str) -> int:
    value = item.get(name)
    return int(value["N"]) if value is not None and "N" in value else 0
