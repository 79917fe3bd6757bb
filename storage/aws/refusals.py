"""Messages refused at the backlog cap, on the record until the thread has been told: the
first few named in `rf:<event id>` attributes (each a `Refusal`'s JSON), the rest counted in
`refused_more` (see `Store.keep`, `Store.refusals_told`)."""

from __future__ import annotations

from collections.abc import Sequence

from botocore.exceptions import ClientError

from storage.aws.errors import code
from storage.aws.expressions import Item, Update, n, s
from storage.aws.layout import REFUSED_ATTRIBUTE, meta_key
from storage.aws.tables import Tables
from storage.models import REFUSALS_NAMED, ConversationKey, Refusal

TOLD_ATTEMPTS = 5  # a count that moved meanwhile (another refusal) is read again


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


def refusals_told(t: Tables, key: ConversationKey, event_ids: Sequence[str], counted: int) -> None:
    """Remove the refusals named by `event_ids`, and lower the count by `counted` (never
    below zero); a record that is gone has nothing left to tell."""
    for _ in range(TOLD_ATTEMPTS):
        update = Update()
        update.require(f"attribute_exists({update.name('pk')})")
        for event_id in dict.fromkeys(event_ids):
            update.remove(REFUSED_ATTRIBUTE + event_id)
        if counted > 0:
            _lower_count(t, key, update, counted)
        if not update.removes and not update.sets:
            return
        try:
            t.dynamodb.update_item(TableName=t.table, Key=meta_key(key), **update.expression())
            return
        except ClientError as exc:
            if code(exc) != "ConditionalCheckFailedException":
                raise
            if (
                counted <= 0
                or t.dynamodb.get_item(
                    TableName=t.table, Key=meta_key(key), ProjectionExpression="pk"
                ).get("Item")
                is None
            ):
                return  # gone: nothing left to tell
    raise ClientError(
        {"Error": {"Code": "ConditionalCheckFailedException", "Message": "count kept moving"}},
        "UpdateItem",
    )


def _lower_count(t: Tables, key: ConversationKey, update: Update, counted: int) -> None:
    """`refused_more` less `counted`, on the condition that it is still what was read."""
    item = t.dynamodb.get_item(
        TableName=t.table,
        Key=meta_key(key),
        ProjectionExpression="refused_more",
        ConsistentRead=True,
    ).get("Item", {})
    current = int(item["refused_more"]["N"]) if "refused_more" in item else 0
    if current <= 0:
        return
    name = update.name("refused_more")
    update.require(f"{name} = {update.value('seen', n(current))}")
    left = current - counted
    if left > 0:
        update.set("refused_more", n(left))
    else:
        update.remove("refused_more")
