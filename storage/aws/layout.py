"""The single-table layout, and conversions between records and DynamoDB items.

    pk = CONV#<team:channel:thread_ts>  sk = META                       the conversation record
    pk = CONV#<...>                     sk = ITEM#g<gen>#<seq:012d>     one session item (or batch)
    pk = CONV#<...>                     sk = TOOL#g<gen>#<call id>      tool-call ledger entry
    pk = CONV#<...>                     sk = INBOX#<µs:018d>#<event id> a queued message
    pk = EVENT#<event id>               sk = EVENT                      processed Slack event

`gen` is the record's generation (its creation time in ms, 13 digits): a record that TTL
removed and that is created again starts a new generation, so none of the old rows (which
expire on their own) are seen or collided with. Records written before generations existed
have generation 0 and unscoped keys (`ITEM#<seq>`, `TOOL#<call id>`). Every row carries
`expires_at` (epoch seconds, DynamoDB's TTL attribute). Index `by_status` (sparse, META only):
hash `conv_status`, range `last_activity_ms`. Session items are opaque JSON strings.
"""

from __future__ import annotations

from datetime import UTC, datetime

from storage.aws.expressions import Item, Value, n, s
from storage.models import CheckpointPointer, Conversation, ConversationKey, Status

STATUS_INDEX = "by_status"
META = "META"
ITEM_PREFIX = "ITEM#"
TOOL_PREFIX = "TOOL#"
INBOX_PREFIX = "INBOX#"


def conv_pk(key: ConversationKey) -> str:
    return f"CONV#{key}"


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


def record_from_item(item: Item) -> Conversation:
    checkpoint = _text(item, "checkpoint")
    lease_expires = item.get("lease_expires_ms")
    retry = item.get("delivery_retry_ms")
    delivered_count = item.get("delivered_count")
    participants = item.get("participants")
    return Conversation(
        key=ConversationKey.parse(item["conv_key"]["S"]),
        status=Status(item["conv_status"]["S"]),
        lease_owner=_text(item, "lease_owner"),
        lease_expires_at=from_ms(lease_expires["N"]) if lease_expires else None,
        fence=_number(item, "fence"),
        checkpoint=CheckpointPointer.model_validate_json(checkpoint) if checkpoint else None,
        next_seq=_number(item, "next_seq"),
        session_floor=_number(item, "session_floor"),
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
        expires_at=datetime.fromtimestamp(int(item["expires_at"]["N"]), tz=UTC),
    )


def expired(item: Item, now: datetime) -> bool:
    """TTL deletes late: a record past its `expires_at` counts as absent."""
    return _number(item, "expires_at", default=1 << 62) < epoch_seconds(now)


def row(key: ConversationKey, sk: str, body: Item, expires: datetime) -> Item:
    return {"pk": s(conv_pk(key)), "sk": s(sk), **body, "expires_at": n(epoch_seconds(expires))}
