"""What every part of the AWS backend shares: the clients, the names, the clock and the
policies (TTL, leases), and the pieces of update expressions that recur."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from storage.aws.expressions import Update, n, s
from storage.aws.layout import (
    INDEXED,
    PLACED,
    STATE_EXPIRES,
    epoch_seconds,
    ms,
    shard_of,
    status_key,
    waiting_sk,
)
from storage.models import ConversationKey, Status, waitable
from storage.policies import Policies

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client


@dataclass
class Tables:
    dynamodb: DynamoDBClient
    s3: S3Client
    table: str
    bucket: str
    clock: Callable[[], datetime]
    policies: Policies

    def shard(self, key: ConversationKey) -> int:
        return shard_of(key, self.policies.status_shards)

    # -- recurring pieces of the record's update expressions ----------------------------

    def touch(self, update: Update, now: datetime) -> None:
        """Activity: moves `last_activity_ms`, the state's expiry and the record's TTL."""
        update.set("updated_ms", n(ms(now)))
        update.set("last_activity_ms", n(ms(now)))
        update.set(STATE_EXPIRES, n(epoch_seconds(self.policies.expiry(now))))
        update.set("expires_at", n(epoch_seconds(self.policies.record_ttl(now))))

    def initialise(self, update: Update, key: ConversationKey, now: datetime) -> None:
        """Fields a new record starts with (left alone on an existing one)."""
        update.set("conv_key", s(str(key)))
        update.set_if_missing("conv_status", s(Status.IDLE.value))
        for counter in ("fence", "next_seq", "session_floor", "inbox_seq"):
            update.set_if_missing(counter, n(0))
        update.set_if_missing("generation", n(ms(now)))
        update.set_if_missing("created_ms", n(ms(now)))
        update.set_if_missing("last_activity_ms", n(ms(now)))
        update.set_if_missing(STATE_EXPIRES, n(epoch_seconds(self.policies.expiry(now))))
        update.set_if_missing("expires_at", n(epoch_seconds(self.policies.record_ttl(now))))

    def set_status(
        self,
        update: Update,
        key: ConversationKey,
        status: Status,
        *,
        run_by: str | None = None,
        now: datetime | None = None,
    ) -> None:
        """The status, its place in the sharded status index (idle is not indexed), in the
        place index (only while awaiting approval or interrupted) and in the approval index
        (awaiting approval, for `run_by`: a write that names nobody leaves it as it was).
        Every write of the status goes through here, so the indexes follow it."""
        update.set("conv_status", s(status.value))
        if status is not Status.AWAITING_APPROVAL:
            update.remove("waiting_ws")
            update.remove("waiting_sk")
        elif run_by is not None and waitable(run_by):
            update.set("waiting_ws", s(key.workspace))
            update.set("waiting_sk", s(waiting_sk(run_by, now or self.clock())))
        if status in INDEXED:
            update.set("status_key", s(status_key(status, self.shard(key))))
        else:
            update.remove("status_key")
        if status in PLACED:
            update.set("place_key", s(key.place))
        else:
            update.remove("place_key")

    def live(self, update: Update, now: datetime, *, create: bool) -> str:
        """The condition that the record's state has not expired (or, with `create`, that
        there is no record)."""
        alive = state_alive(update, now)
        if create:
            return f"attribute_not_exists(pk) OR {alive}"
        return f"attribute_exists(pk) AND {alive}"

    def lease_free(self, update: Update, now: datetime) -> str:
        cutoff = update.value("cutoff", n(ms(self.policies.takeover_cutoff(now))))
        return (
            f"attribute_not_exists(pk) OR attribute_not_exists({update.name('lease_owner')}) OR "
            f"{update.name('lease_expires_ms')} < {cutoff}"
        )


def state_alive(update: Update, now: datetime) -> str:
    """The record's state has not expired (records written before `state_expires` have
    only `expires_at`)."""
    now_s = update.value("now_s", n(epoch_seconds(now)))
    state, ttl = update.name(STATE_EXPIRES), update.name("expires_at")
    return (
        f"((attribute_exists({state}) AND {state} >= {now_s}) OR "
        f"(attribute_not_exists({state}) AND {ttl} >= {now_s}))"
    )
