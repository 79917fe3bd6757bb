"""A conversation's summary (`Store.read_summary`) on DynamoDB: a row of its own beside the
record, `SUMMARY#g<gen>`, written (replaced) by the commit's transaction that stores it, so
that the record (read and written on every turn) stays small. The record names it
(`summary_seq`); reading it is one GetItem, made only when the record names one.

The row expires like the conversation's other rows, but it must last as long as the
conversation does: a thread can go on for longer than `state_ttl` without a new summary
(its turns fit the window behind the old one). So it is written to outlive the state a
commit keeps alive by a margin (`RENEWAL_MARGIN`: a day, as S3's copies of a
conversation's objects outlive it), and the record says when it expires
(`summary_expires`). A lease taken when less than the state's TTL is left of it carries
`Lease.summary_due`, and the next commit of a turn under that lease moves the row's
expiry on, in its own transaction: at most once a margin per conversation, one action.
A row past its expiry (not yet deleted by DynamoDB) is gone to a reader."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from storage.aws.expressions import Item, Update, n, s
from storage.aws.layout import conv_pk, epoch_seconds, row
from storage.aws.tables import Tables
from storage.models import Conversation, Summary, applies
from storage.writes import KEEP, Commit

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

SUMMARY_PREFIX = "SUMMARY#"
SUMMARY_EXPIRES = "summary_expires"  # on the record: when the summary's row expires
RENEWAL_MARGIN = timedelta(days=1)  # what a summary's row outlives its state by, at most


def summary_sk(generation: int) -> str:
    return f"{SUMMARY_PREFIX}g{generation:013d}"


def summary_expiry(tables: Tables, now: datetime) -> datetime:
    """When a summary written (or renewed) now expires: past the state this write keeps."""
    return tables.policies.expiry(now) + min(RENEWAL_MARGIN, tables.policies.state_ttl)


def renewal_due(tables: Tables, item: Item, now: datetime) -> bool:
    """Whether the record `item` names a summary that would expire before the state that a
    commit now keeps alive (records written before `summary_expires`: always)."""
    if _number(item, "summary_seq", 0) == 0:
        return False
    return _number(item, SUMMARY_EXPIRES, 0) < epoch_seconds(tables.policies.expiry(now))


def summary_actions(
    tables: Tables, commit: Commit, update: Update, generation: int, now: datetime
) -> list[TransactWriteItemTypeDef]:
    """The commit's summary, if it carries one: its row, put in the same transaction; else,
    when its lease says the summary's row is due and the commit is a turn's (items or a
    checkpoint), the row's expiry moved on. Either way the record says the new expiry."""
    expires = epoch_seconds(summary_expiry(tables, now))
    key = {"pk": s(conv_pk(commit.key)), "sk": s(summary_sk(generation))}
    if commit.summary is not None:
        body = {"through": n(commit.summary.through), "text": s(commit.summary.text)}
        item = row(commit.key, summary_sk(generation), body, summary_expiry(tables, now))
        update.set(SUMMARY_EXPIRES, n(expires))
        return [{"Put": {"TableName": tables.table, "Item": item}}]
    turn = bool(commit.items) or commit.checkpoint not in (KEEP, None)
    if commit.lease is None or not commit.lease.summary_due or not turn:
        return []
    update.set(SUMMARY_EXPIRES, n(expires))
    # Unconditional (a failed condition would cancel the commit): a row already gone is
    # made again as a bare key, which a reader takes for no summary.
    return [
        {
            "Update": {
                "TableName": tables.table,
                "Key": key,
                "UpdateExpression": "SET #expires = :expires",
                "ExpressionAttributeNames": {"#expires": "expires_at"},
                "ExpressionAttributeValues": {":expires": n(expires)},
            }
        }
    ]


class Summaries:
    def __init__(self, tables: Tables) -> None:
        self.t = tables

    def read_summary(self, record: Conversation) -> Summary | None:
        if not applies(record):
            return None
        found = self.t.dynamodb.get_item(
            TableName=self.t.table,
            Key={"pk": s(conv_pk(record.key)), "sk": s(summary_sk(record.generation))},
            ConsistentRead=True,
        )
        item: Item | None = found.get("Item")
        if item is None or "through" not in item or int(item["through"]["N"]) != record.summary_seq:
            return None  # expired with the conversation's older rows, or another's
        if _number(item, "expires_at", 1 << 62) < epoch_seconds(self.t.clock()):
            return None  # expired, not yet deleted by DynamoDB
        return Summary(through=record.summary_seq, text=item["text"]["S"])


def _number(item: Item, name: str, default: int) -> int:
    value = item.get(name, {}).get("N")
    return default if value is None else int(value)
