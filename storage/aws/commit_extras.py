"""What a commit's transaction carries beside the record's update (`commits`): the moves
between the status counters' buckets, and the calls it records as approved."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from storage.aws import tools as ledger_rows
from storage.aws.expressions import Update, n, s
from storage.aws.layout import counter_key, day_of
from storage.aws.tables import Tables
from storage.models import Status
from storage.writes import Commit

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef


def counter_actions(
    tables: Tables, commit: Commit, update: Update, now: datetime
) -> list[TransactWriteItemTypeDef]:
    """A release that settles the conversation in another status (or expiry day) moves
    it between counter buckets, in the same transaction; a plain turn (idle, running,
    idle again, the same day) writes no counter."""
    lease = commit.lease
    if lease is None or not commit.release or commit.status in (None, Status.RUNNING):
        return []
    assert commit.status is not None
    old = lease.counted
    # The day its state expires: moved by this write, or as counted before.
    day = (
        old.rsplit("#", 1)[-1] if old and not commit.touch else day_of(tables.policies.expiry(now))
    )
    new = f"{commit.status.value}#{day}"
    if new == old:
        return []
    update.set("counted", s(new))
    was = update.value("counted_was", s(old or ""))
    update.require(f"attribute_not_exists(#counted) OR #counted = {was}")
    shard = tables.shard(commit.key)
    changes: dict[str, dict[str, int]] = {}
    if old:
        old_status, old_day = old.rsplit("#", 1)
        changes.setdefault(old_day, {})[old_status] = -1
    changes.setdefault(day, {})
    changes[day][commit.status.value] = changes[day].get(commit.status.value, 0) + 1
    actions: list[TransactWriteItemTypeDef] = []
    for counter_day, deltas in changes.items():
        counter = Update()
        for status, delta in deltas.items():
            counter.adds.append(f"{counter.name('n_' + status)} {counter.value(status, n(delta))}")
        expires = int(datetime.strptime(counter_day, "%Y%m%d").timestamp()) + 3 * 86400
        counter.set("expires_at", n(expires))
        actions.append({"Update": counter.as_update(tables.table, counter_key(shard, counter_day))})
    return actions


def ledger_actions(
    tables: Tables,
    commit: Commit,
    generation: int,
    now: datetime,
    put_blob: Callable[[str, bytes], None],
) -> list[TransactWriteItemTypeDef]:
    """Calls armed by this commit: recorded as approved in the same write (each is
    recorded as started just before it runs: `Ledger.begin`)."""
    return [
        {
            "Put": {
                "TableName": tables.table,
                "Item": ledger_rows.started_row(
                    record, generation, tables.policies.expiry(now), put_blob
                ),
                "ConditionExpression": "attribute_not_exists(sk)",
            }
        }
        for record in commit.arm
    ]
