"""A conversation's summary (`Store.read_summary`) on DynamoDB: a row of its own beside the
record, `SUMMARY#g<gen>`, written (replaced) by the commit's transaction that stores it, so
that the record (read and written on every turn) stays small. The record names it
(`summary_seq`); reading it is one GetItem, made only when the record names one."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from storage.aws.expressions import Item, n, s
from storage.aws.layout import conv_pk, row
from storage.aws.tables import Tables
from storage.models import Conversation, Summary, applies
from storage.writes import Commit

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

SUMMARY_PREFIX = "SUMMARY#"


def summary_sk(generation: int) -> str:
    return f"{SUMMARY_PREFIX}g{generation:013d}"


def summary_actions(
    tables: Tables, commit: Commit, generation: int, now: datetime
) -> list[TransactWriteItemTypeDef]:
    """The commit's summary, if it carries one: its row, put in the same transaction."""
    if commit.summary is None:
        return []
    body = {"through": n(commit.summary.through), "text": s(commit.summary.text)}
    item = row(commit.key, summary_sk(generation), body, tables.expiry(now))
    return [{"Put": {"TableName": tables.table, "Item": item}}]


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
        if item is None or int(item["through"]["N"]) != record.summary_seq:
            return None  # expired with the conversation's older rows, or another's
        return Summary(through=record.summary_seq, text=item["text"]["S"])
