"""People's verdicts on answers: one `VOTE#<answer>#<user>` row per person and answer, the
conversation's tally in its record (`fb_good`, `fb_bad`) and the overall tally in the shard's
`FEEDBACK` counter row, all moved in one transaction. A changed verdict moves one count from
one side to the other; the vote row's condition (the verdict read before) makes concurrent
clicks by the same person count once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from storage.aws.errors import code, reasons
from storage.aws.expressions import Item, Update, n, s
from storage.aws.layout import conv_pk, epoch_seconds, expired, meta_key
from storage.aws.tables import Tables, state_alive
from storage.models import ConversationKey, FeedbackTally, Verdict

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

VOTE_PREFIX = "VOTE#"
FEEDBACK_SK = "FEEDBACK"
ATTEMPTS = 5  # concurrent clicks by one person on one answer, re-read each time


def vote_key(key: ConversationKey, answer: str, user: str) -> Item:
    return {"pk": s(conv_pk(key)), "sk": s(f"{VOTE_PREFIX}{answer}#{user}")}


def feedback_counter(shard: int) -> Item:
    return {"pk": s(f"COUNT#{shard:03d}"), "sk": s(FEEDBACK_SK)}


def tally_of(item: Item, good: str = "fb_good", bad: str = "fb_bad") -> FeedbackTally:
    def number(name: str) -> int:
        value = item.get(name)
        return int(value["N"]) if value and "N" in value else 0

    return FeedbackTally(good=max(number(good), 0), bad=max(number(bad), 0))


class Feedback:
    def __init__(self, tables: Tables) -> None:
        self.t = tables

    def record(
        self, key: ConversationKey, answer: str, user: str, verdict: Verdict
    ) -> FeedbackTally | None:
        for _ in range(ATTEMPTS):
            meta = self._get(meta_key(key))
            if meta is None or expired(meta, self.t.clock()):
                return None
            vote = self._get(vote_key(key, answer, user))
            before = Verdict(vote["verdict"]["S"]) if vote else None
            if before is verdict:
                return tally_of(meta)
            try:
                self._move(key, answer, user, verdict, before)
            except ClientError as exc:
                if code(exc) != "TransactionCanceledException":
                    raise
                failed = [r.get("Code") for r in reasons(exc)]
                if failed and failed[0] == "ConditionalCheckFailed":
                    return None  # the conversation went meanwhile
                continue  # the same person clicked again meanwhile: read again
            after = self._get(meta_key(key))
            return tally_of(after) if after else None
        return None

    def _move(
        self,
        key: ConversationKey,
        answer: str,
        user: str,
        verdict: Verdict,
        before: Verdict | None,
    ) -> None:
        good = (verdict is Verdict.GOOD) - (before is Verdict.GOOD)
        bad = (verdict is Verdict.BAD) - (before is Verdict.BAD)
        deltas = {":good": n(good), ":bad": n(bad)}
        now = self.t.clock()
        alive = Update()
        condition = f"attribute_exists(pk) AND {state_alive(alive, now)}"
        vote_condition: dict[str, object] = (
            {"ConditionExpression": "attribute_not_exists(sk)"}
            if before is None
            else {
                "ConditionExpression": "verdict = :before",
                "ExpressionAttributeValues": {":before": s(before.value)},
            }
        )
        actions: list[TransactWriteItemTypeDef] = [
            {
                "Update": {
                    "TableName": self.t.table,
                    "Key": meta_key(key),
                    "UpdateExpression": "ADD fb_good :good, fb_bad :bad",
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": alive.names,
                    "ExpressionAttributeValues": {**deltas, **alive.values},
                }
            },
            {
                "Put": {
                    "TableName": self.t.table,
                    "Item": {
                        **vote_key(key, answer, user),
                        "verdict": s(verdict.value),
                        "expires_at": n(epoch_seconds(self.t.policies.expiry(now))),
                    },
                    **vote_condition,  # type: ignore[typeddict-item]
                }
            },
            {
                "Update": {
                    "TableName": self.t.table,
                    "Key": feedback_counter(self.t.shard(key)),
                    "UpdateExpression": "ADD good :good, bad :bad",
                    "ExpressionAttributeValues": deltas,
                }
            },
        ]
        self.t.dynamodb.transact_write_items(TransactItems=actions)

    def count(self) -> FeedbackTally:
        total = FeedbackTally()
        for shard in range(self.t.policies.status_shards):
            item = self._get(feedback_counter(shard))
            if item:
                total = total.add(tally_of(item, "good", "bad"))
        return total

    def _get(self, key: Item) -> Item | None:
        found = self.t.dynamodb.get_item(TableName=self.t.table, Key=key, ConsistentRead=True)
        item: Item | None = found.get("Item")
        return item
