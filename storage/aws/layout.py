"""The single-table layout, and conversions between records and DynamoDB items.

    pk = CONV#<team:channel:thread_ts>  sk = META                       the conversation record
    pk = CONV#<...>                     sk = ITEM#g<gen>#<seq:012d>     one session item (or batch)
    pk = CONV#<...>                     sk = TOOL#g<gen>#<call id>      tool-call ledger entry
    pk = CONV#<...>                     sk = INBOX#<entry id>           a queued message too big
                                                                        to live in the record
    pk = CONV#<...>                     sk = SUMMARY#g<gen>             the conversation's summary
                                                                        (`summaries`)
    pk = CONV#<...>                     sk = VOTE#<answer>#<user>       a verdict on an answer
    pk = COUNT#<shard:03d>              sk = DAY#<yyyymmdd>             conversations by status
    pk = COUNT#<shard:03d>              sk = FEEDBACK                   verdicts (see `feedback`)
    pk = EVENT#<event id>               sk = EVENT                      a claimed event (global)
    pk = INSTALL#<install id>           sk = INSTALL                    an installation document
    pk = STATE#<state>                  sk = STATE                      a one-time state
    pk = REMOVALS                       sk = <removal id>               a workspace that removed
                                                                        the app (`installations`)
    pk = PERSON#<[ent:]team:user>       sk = PERSON                     a person's record

Queued messages live in the record itself (`in:<entry id>` attributes) with their event claims,
so that keeping a message, taking the thread and reading what is queued is one write that
returns everything; but only a few small ones (`INLINE_ENTRIES` of at most
`INLINE_ENTRY_LIMIT` bytes, counted in `inbox_inline`): the rest of a busy thread's backlog
lives in `INBOX#` rows (counted in `inbox_rows`), whose event claims are `CLAIM#<digest>`
rows, so that the record, and with it the cost of every write to it, stays small however
long the backlog. `inbox_count` counts every queued message (the backlog cap; a request kept
past the cap, a stop or a decision, is not counted: see `capped_entry`); while
`spill_until` has not passed, claims may live in rows, so every keep goes to a row.
A message refused at the backlog cap is named in the record until the thread has been told
(`rf:<event id>`, its `Refusal` JSON; at most `REFUSALS_NAMED` or so, the rest counted in
`refused_more`).

The record's own TTL (`expires_at`) lies `tombstone_ttl` beyond its state's expiry
(`state_expires`, epoch seconds; records written before it have only `expires_at`): past
`state_expires` the record counts as absent for every operation, but it stays, as the
conversation's tombstone, so that the next event in the thread can say what expired. Every
other row of the conversation expires with the state.

Claims in the record are 64-bit digests of event ids in three string sets (`ev0`..`ev2`), one
per period of `claim_ttl` in turn (see `claim_sets`): a few bytes each, and a handful of
attributes however busy the thread (records written before the sets have one `ev:<event id>`
attribute per claim, holding its expiry; they are still honoured, and removed once expired).
Entry ids start with the arrival time in microseconds, so they sort in arrival order.

Index `by_status_shard` (sparse): hash `status_key` = `<status>#<shard:03d>`, range
`last_activity_ms`; idle conversations are not in it. Counters: the record names the bucket it
is counted in (`counted` = `<status>#<yyyymmdd of its expiry day>`); a count is the sum of the
buckets whose day has not passed, so conversations that TTL removed stop counting without
any code running.

Index `by_place` (sparse): hash `place_key` = the key without its thread_ts
(`[enterprise:]team:channel`, see `place_of`), range `last_activity_ms`; only conversations
awaiting approval or interrupted are in it (`Tables.set_status` sets and removes the
attribute), so one channel's paused threads are one query, newest first.

Index `by_waiting` (sparse): hash `waiting_ws` = the key's workspace (`[enterprise:]team`,
see `workspace_of`), range `waiting_sk` = `<user>#<waiting since, ms:013d>`; only
conversations awaiting approval that wait on someone are in it (`Tables.set_status`), so the
approvals waiting on one person are one query (`begins_with` their id), and a workspace's
all of them one partition. It carries the checkpoint pointer too: the calls that wait are
read from it without reading the record.

Person records (`storage.people`): pk = `PERSON#<[enterprise:]team:user>`, sk = `PERSON`,
the record's document in `doc`, its `version` (each write's condition) and `expires_at`.

`gen` is the record's generation (its creation time in ms, 13 digits): a record that TTL
removed and that is created again starts a new generation, so none of the old rows (which
expire on their own) are seen or collided with. Records written before generations existed
have generation 0 and unscoped keys (`ITEM#<seq>`, `TOOL#<call id>`). Every row carries
`expires_at` (epoch seconds, DynamoDB's TTL attribute), except installation documents, which
are kept until deleted, and removals while they are pending (they expire once finished).
Index `by_status` (sparse, META only): hash `conv_status`, range `last_activity_ms`. Session
items are opaque JSON strings.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime, timedelta

from storage.aws.expressions import Item, Value, n, s
from storage.listings import PAUSED_IN_CHANNEL
from storage.models import (
    CheckpointPointer,
    Conversation,
    ConversationKey,
    Expiry,
    FeedbackTally,
    InboxEntry,
    Refusal,
    Status,
)

STATUS_INDEX = "by_status_shard"
PLACE_INDEX = "by_place"
WAITING_INDEX = "by_waiting"
META = "META"
ITEM_PREFIX = "ITEM#"
TOOL_PREFIX = "TOOL#"
INBOX_PREFIX = "INBOX#"
CLAIM_PREFIX = "CLAIM#"  # + claim digest: the claim of a message kept in a row
STATE_EXPIRES = "state_expires"  # when the record's state expires (its TTL is later)
INLINE_INBOX = "in:"  # + entry id: a queued message (its JSON), or ROW_MARK
ROW_MARK = "row"  # the entry is too big for the record: it lives in an INBOX# row
ROW_SUFFIX = "#~row"  # ends the id of such an entry, so that consuming it deletes the row
SPILL_SUFFIX = "#~spill"  # ends the id of a message kept in a row (counted in `inbox_rows`)
LEGACY_CLAIM = "ev:"  # + event id: a claim as written before the sets (its expiry, epoch s)
CLAIM_SETS = ("ev0", "ev1", "ev2")  # event claims by period (see `claim_sets`)
REFUSED_ATTRIBUTE = "rf:"  # + event id: a refusal the thread was not told of (its JSON)
INDEXED = frozenset(status for status in Status if status is not Status.IDLE)
PLACED = frozenset(PAUSED_IN_CHANNEL)  # the statuses in the place index
# What the status index carries besides its keys: enough for lists and recovery.
INDEX_ATTRIBUTES = (
    "pk",
    "sk",
    "conv_key",
    "conv_status",
    "lease_owner",
    "lease_expires_ms",
    "fence",
    "next_seq",
    "session_floor",
    "inbox_seq",
    "generation",
    "created_ms",
    "updated_ms",
    "expires_at",
    "delivery_retry_ms",
    "delivery_attempts",
    "delivery_error",
)
# The place index carries the same, and who took part (whom `/resume` lists a thread to).
PLACE_ATTRIBUTES = (*INDEX_ATTRIBUTES, "participants")
# The approval index: the same, its activity, who started the run, and the checkpoint
# pointer (where the calls that wait are).
WAITING_ATTRIBUTES = (*PLACE_ATTRIBUTES, "last_activity_ms", "run_by", "checkpoint")


def waiting_sk(user: str, since: datetime) -> str:
    """The approval index's sort key: the person, then when the wait began."""
    return f"{user}#{ms(since):013d}"


def person_key(key: str) -> dict[str, Value]:
    return {"pk": s(f"PERSON#{key}"), "sk": s("PERSON")}


def conv_pk(key: ConversationKey) -> str:
    return f"CONV#{key}"


def shard_of(key: ConversationKey, shards: int) -> int:
    """A stable shard per conversation (not Python's salted `hash`)."""
    digest = hashlib.blake2b(str(key).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % shards


def status_key(status: Status, shard: int) -> str:
    return f"{status.value}#{shard:03d}"


def counter_key(shard: int, day: str) -> dict[str, Value]:
    return {"pk": s(f"COUNT#{shard:03d}"), "sk": s(f"DAY#{day}")}


def day_of(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%d")


def bucket(status: Status, expires: datetime) -> str:
    """The counter bucket of a conversation in `status` that expires at `expires`."""
    return f"{status.value}#{day_of(expires)}"


def install_key(install_id: str) -> dict[str, Value]:
    return {"pk": s(f"INSTALL#{install_id}"), "sk": s("INSTALL")}


def state_key(state: str) -> dict[str, Value]:
    return {"pk": s(f"STATE#{state}"), "sk": s("STATE")}


REPLICAS = "REPLICAS"  # the partition of replicas' heartbeats (see `replicas`)
REMOVALS = "REMOVALS"  # the partition of workspaces that removed the app (`installations`)


def removal_key(removal_id: str) -> dict[str, Value]:
    return {"pk": s(REMOVALS), "sk": s(removal_id)}


def replica_key(replica: str) -> dict[str, Value]:
    return {"pk": s(REPLICAS), "sk": s(replica)}


def meta_key(key: ConversationKey) -> dict[str, Value]:
    return {"pk": s(conv_pk(key)), "sk": s(META)}


def item_prefix(generation: int) -> str:
    return f"{ITEM_PREFIX}g{generation:013d}#" if generation else ITEM_PREFIX


def item_sk(generation: int, seq: int) -> str:
    return f"{item_prefix(generation)}{seq:012d}"


def seq_of(sk: str) -> int:
    return int(sk.rsplit("#", 1)[-1])


def in_generation(sk: str, generation: int) -> bool:
    """Whether an item row belongs to `generation` (legacy rows have digits after `ITEM#`)."""
    if generation:
        return sk.startswith(item_prefix(generation))
    return sk.startswith(ITEM_PREFIX) and sk[len(ITEM_PREFIX) : len(ITEM_PREFIX) + 1].isdigit()


def tool_sk(generation: int, call_id: str) -> str:
    return f"{TOOL_PREFIX}g{generation:013d}#{call_id}" if generation else TOOL_PREFIX + call_id


def inbox_sk(entry_id: str) -> str:
    return INBOX_PREFIX + entry_id


def in_row(entry_id: str) -> bool:
    """Whether a queued message lives in an `INBOX#` row (consuming it deletes the row)."""
    return entry_id.endswith((ROW_SUFFIX, SPILL_SUFFIX))


def claim_sk(event_id: str) -> str:
    return CLAIM_PREFIX + claim_digest(event_id)


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def epoch_seconds(moment: datetime) -> int:
    return int(moment.timestamp())


def from_ms(value: str) -> datetime:
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC)


def _number(item: Item, name: str, default: int = 0) -> int:
    value = item.get(name)
    return int(value["N"]) if value is not None and "N" in value else default


def _text(item: Item, name: str) -> str | None:
    value = item.get(name)
    return value["S"] if value is not None and "S" in value else None


def inline_entries(item: Item) -> tuple[list[InboxEntry], bool]:
    """The queued messages a record holds, oldest first, and whether some live in rows."""
    entries, in_rows = [], _number(item, "inbox_rows") > 0
    for name in sorted(a for a in item if a.startswith(INLINE_INBOX)):
        text = item[name].get("S", "")
        if text == ROW_MARK:  # written by earlier versions for a message too big
            in_rows = True
        else:
            entries.append(InboxEntry.model_validate(json.loads(text)))
    return entries, in_rows


def record_from_item(item: Item, *, with_inbox: bool = False) -> Conversation:
    """The record; with its inline inbox when `with_inbox` and no entry lives in a row."""
    checkpoint = _text(item, "checkpoint")
    lease_expires = item.get("lease_expires_ms")
    retry = item.get("delivery_retry_ms")
    delivered_count = item.get("delivered_count")
    participants = item.get("participants")
    gone_state = _text(item, "expired_from")
    return Conversation(
        key=ConversationKey.parse(item["conv_key"]["S"]),
        status=Status(item["conv_status"]["S"]),
        lease_owner=_text(item, "lease_owner"),
        lease_expires_at=from_ms(lease_expires["N"]) if lease_expires else None,
        fence=_number(item, "fence"),
        checkpoint=CheckpointPointer.model_validate_json(checkpoint) if checkpoint else None,
        next_seq=_number(item, "next_seq"),
        session_floor=_number(item, "session_floor"),
        summary_seq=_number(item, "summary_seq"),
        generation=_number(item, "generation"),
        participants=frozenset(participants["SS"]) if participants else frozenset(),
        inbox_seq=_number(item, "inbox_seq"),
        delivered_version=_number(item, "delivered_version"),
        delivered_count=int(delivered_count["N"]) if delivered_count else None,
        delivery_attempts=_number(item, "delivery_attempts"),
        delivery_retry_at=from_ms(retry["N"]) if retry else None,
        delivery_error=_text(item, "delivery_error"),
        created_at=from_ms(item["created_ms"]["N"]),
        updated_at=from_ms(item["updated_ms"]["N"]),
        last_activity_at=from_ms(item["last_activity_ms"]["N"]),
        expires_at=datetime.fromtimestamp(state_expiry(item), tz=UTC),
        counted=_text(item, "counted"),
        stop_by=_text(item, "stop_by"),
        run_by=_text(item, "run_by"),
        **_waiting(item),
        expired_from=Expiry.model_validate_json(gone_state) if gone_state else None,
        feedback=FeedbackTally(
            good=max(_number(item, "fb_good"), 0), bad=max(_number(item, "fb_bad"), 0)
        ),
        refused=named_refusals(item),
        refused_more=max(_number(item, "refused_more"), 0),
        inbox=_inbox(item) if with_inbox else None,
    )


def named_refusals(item: Item) -> list[Refusal]:
    """The refusals a record names (not yet told), oldest first."""
    found = [
        Refusal.model_validate_json(value["S"])
        for name, value in item.items()
        if name.startswith(REFUSED_ATTRIBUTE) and "S" in value
    ]
    return sorted(found, key=lambda refusal: refusal.at)


def _waiting(item: Item) -> dict[str, object]:
    """Whom it waits on and since when, from the approval index's sort key."""
    sort_key = _text(item, "waiting_sk")
    if not sort_key or "#" not in sort_key:
        return {}
    user, _, since = sort_key.rpartition("#")
    return {"waiting_on": user, "waiting_since": from_ms(since)}


def _inbox(item: Item) -> list[InboxEntry] | None:
    entries, in_rows = inline_entries(item)
    return None if in_rows else entries


def claim_digest(event_id: str) -> str:
    """What a record keeps of a claimed event id: 64 bits of BLAKE2b, 11 characters (two
    ids of one thread collide with odds of about n² / 2^65)."""
    digest = hashlib.blake2b(event_id.encode(), digest_size=8).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def claim_sets(now: datetime, period: timedelta) -> tuple[str, str, str]:
    """The (current, previous, next) claim sets at `now`. A keep adds its claim to the current
    set, is refused if the current or the previous one holds it, and empties the next one
    (the one the following period adds to). So a claim is honoured for at least one period
    (less the replicas' clock skew, at a period's turn), and a record holds the claims of two
    or three periods, never more."""
    index = int(now.timestamp() // max(period.total_seconds(), 1.0))
    return CLAIM_SETS[index % 3], CLAIM_SETS[(index - 1) % 3], CLAIM_SETS[(index + 1) % 3]


def claimed(item: Item, event_id: str, now: datetime, period: timedelta) -> bool:
    """The record holds a live claim of this event id."""
    digest = claim_digest(event_id)
    current, previous, _ = claim_sets(now, period)
    if any(digest in item.get(name, {}).get("SS", ()) for name in (current, previous)):
        return True
    legacy = item.get(LEGACY_CLAIM + event_id)
    return legacy is not None and int(legacy.get("N", "0")) >= epoch_seconds(now)


def expired_claims(item: Item, now: datetime) -> tuple[str, ...]:
    """Claims written before the sets whose time is over: the next fenced write removes them."""
    limit = epoch_seconds(now)
    return tuple(
        name
        for name, value in item.items()
        if name.startswith(LEGACY_CLAIM) and int(value.get("N", "0")) < limit
    )


def state_expiry(item: Item) -> int:
    """When the record's state expires (epoch seconds)."""
    return _number(item, STATE_EXPIRES, default=_number(item, "expires_at", default=1 << 62))


def expired(item: Item, now: datetime) -> bool:
    """A record past its state's expiry counts as absent (TTL deletes late, and a record
    outlives its state as a tombstone: see `gone`)."""
    return state_expiry(item) < epoch_seconds(now)


def gone(item: Item, now: datetime) -> bool:
    """Past the record's own TTL: not even a tombstone any more."""
    return _number(item, "expires_at", default=1 << 62) < epoch_seconds(now)


def row(key: ConversationKey, sk: str, body: Item, expires: datetime) -> Item:
    return {"pk": s(conv_pk(key)), "sk": s(sk), **body, "expires_at": n(epoch_seconds(expires))}
