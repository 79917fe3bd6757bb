"""The single-table layout, and conversions between records and DynamoDB items.

    pk = CONV#<team:channel:thread_ts>  sk = META              the conversation record
    pk = CONV#<...>                     sk = ITEM#<seq:012d>   one session item (or a batch)
    pk = CONV#<...>                     sk = TOOL#<call id>    tool-call ledger entry
    pk = CONV#<...>                     sk = INBOX#<ms>#<event> a queued user message
    pk = EVENT#<event id>               sk = EVENT             processed Slack event
Index `by_status` (sparse, META only): hash `conv_status`, range `last_activity_ms`.
TTL attribute: `expires_at` (epoch seconds). Items are stored as opaque JSON strings.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from storage.models import CheckpointPointer, Conversation, ConversationKey, Status

STATUS_INDEX = "by_status"
META = "META"
ITEM_PREFIX = "ITEM#"
TOOL_PREFIX = "TOOL#"
INBOX_PREFIX = "INBOX#"

Item = dict[str, Any]


def conv_pk(key: ConversationKey) -> str:
    return f"CONV#{key}"


def item_sk(seq: int) -> str:
    return f"{ITEM_PREFIX}{seq:012d}"


def seq_of(sk: str) -> int:
    return int(sk.removeprefix(ITEM_PREFIX))


def s(value: str) -> dict[str, str]:
    return {"S": value}


def n(value: int | float) -> dict[str, str]:
    return {"N": str(value)}


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def from_ms(value: str) -> datetime:
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC)


def record_from_item(item: Item) -> Conversation:
    checkpoint = item.get("checkpoint")
    lease_expires = item.get("lease_expires_ms")
    return Conversation(
        key=ConversationKey.parse(item["conv_key"]["S"]),
        status=Status(item["conv_status"]["S"]),
        lease_owner=item["lease_owner"]["S"] if "lease_owner" in item else None,
        lease_expires_at=from_ms(lease_expires["N"]) if lease_expires else None,
        fence=int(item["fence"]["N"]),
        checkpoint=(CheckpointPointer.model_validate_json(checkpoint["S"]) if checkpoint else None),
        next_seq=int(item["next_seq"]["N"]),
        session_floor=int(item["session_floor"]["N"]),
        inbox_seq=int(item.get("inbox_seq", {"N": "0"})["N"]),
        delivered_version=int(item.get("delivered_version", {"N": "0"})["N"]),
        created_at=from_ms(item["created_ms"]["N"]),
        updated_at=from_ms(item["updated_ms"]["N"]),
        last_activity_at=from_ms(item["last_activity_ms"]["N"]),
        expires_at=datetime.fromtimestamp(int(item["expires_at"]["N"]), tz=UTC),
    )


class Update:
    """Builds an UpdateExpression with its names and values, without unused placeholders
    (DynamoDB rejects those)."""

    def __init__(self) -> None:
        self.sets: list[str] = []
        self.removes: list[str] = []
        self.conditions: list[str] = []
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def name(self, attribute: str) -> str:
        self.names[f"#{attribute}"] = attribute
        return f"#{attribute}"

    def value(self, label: str, value: dict[str, Any]) -> str:
        self.values[f":{label}"] = value
        return f":{label}"

    def set(self, attribute: str, value: dict[str, Any]) -> None:
        self.sets.append(f"{self.name(attribute)} = {self.value(attribute, value)}")

    def set_if_missing(self, attribute: str, value: dict[str, Any]) -> None:
        name = self.name(attribute)
        placeholder = self.value(f"init_{attribute}", value)
        self.sets.append(f"{name} = if_not_exists({name}, {placeholder})")

    def remove(self, attribute: str) -> None:
        self.removes.append(self.name(attribute))

    def require(self, condition: str) -> None:
        self.conditions.append(f"({condition})")

    def fenced(self, fence: int, owner: str) -> None:
        self.require(
            f"{self.name('fence')} = {self.value('fence', n(fence))} AND "
            f"{self.name('lease_owner')} = {self.value('lease_owner', s(owner))}"
        )

    def expression(self) -> dict[str, Any]:
        parts = []
        if self.sets:
            parts.append("SET " + ", ".join(self.sets))
        if self.removes:
            parts.append("REMOVE " + ", ".join(self.removes))
        out: dict[str, Any] = {
            "UpdateExpression": " ".join(parts),
            "ExpressionAttributeNames": self.names,
        }
        if self.values:
            out["ExpressionAttributeValues"] = self.values
        if self.conditions:
            out["ConditionExpression"] = " AND ".join(self.conditions)
        return out
