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
    """Remove the refusals named by `event_ids`, and lower the count by `counted`: one
    write that no concurrent refusal makes fail (an ADD), unless the count is below
    `counted` (told twice): then only the names go. A record that is gone has nothing left
    to tell."""
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
            t.dynamodb.update_item(TableName=t.table, Key=meta_key(key), **update.expression())
            return
        except ClientError as exc:
            if code(exc) != "ConditionalCheckFailedException":
                raise
