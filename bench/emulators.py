"""The AWS emulators every benchmark shares in one run: DynamoDB Local and moto's S3 on
loopback, started once, warmed, and measured raw (one request of each kind the code sends,
on a client configured like the store's) so that the other figures have a scale.

Warm-up: the JVM compiles DynamoDB Local's hot paths and moto imports its S3 backend on
first use, so the first few hundred requests are several times slower than the rest. Every
benchmark runs after `warm()`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from bench.common import percentile, table
from storage.aws import AwsStore, create_resources
from testkit.services import aws_environment, dynamodb_local, environment, moto_s3

RAW_KINDS = (
    "dynamodb.GetItem",
    "dynamodb.UpdateItem",
    "dynamodb.PutItem",
    "dynamodb.Query",
    "dynamodb.Query(index)",
    "dynamodb.TransactWriteItems",
    "dynamodb.BatchWriteItem",
    "s3.PutObject",
    "s3.GetObject",
)


@dataclass
class Emulators:
    env: dict[str, str]
    raw_ms: dict[str, tuple[float, float]] = field(default_factory=dict)  # kind -> (p50, p99)

    def new_names(self, prefix: str) -> tuple[str, str]:
        """A fresh table and bucket (created), for one benchmark."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        create_resources(name, name)
        return name, name

    def bot_storage(self, prefix: str) -> dict[str, str]:
        """The bot's environment for the aws backend on a fresh table and bucket."""
        table_name, bucket = self.new_names(prefix)
        return {"BOT_STORAGE": "aws", "BOT_TABLE": table_name, "BOT_BUCKET": bucket}

    def store(self, prefix: str, **options: Any) -> AwsStore:
        table_name, bucket = self.new_names(prefix)
        return AwsStore(table_name, bucket, **options)

    def raw(self, kind: str) -> float:
        """p50 ms of one request of this kind (TransactWriteItems: two actions)."""
        return self.raw_ms.get(kind, self.raw_ms.get(kind.replace("(index)", ""), (0.0, 0.0)))[0]

    def io_ms(self, requests: dict[str, float]) -> float:
        """The summed raw p50 latency of a set of requests ("dynamodb.UpdateItem" -> n)."""
        return sum(self.raw(kind) * n for kind, n in requests.items())


@contextmanager
def running() -> Iterator[Emulators]:
    """Start both emulators and point this process (and its children) at them."""
    with ExitStack() as stack:
        dynamodb_url = stack.enter_context(dynamodb_local())
        s3_url = stack.enter_context(moto_s3())
        env = aws_environment(dynamodb_url, s3_url)
        with environment(env):
            yield Emulators(env)


def _requests(store: AwsStore) -> dict[str, Callable[[int], Any]]:
    ddb, s3, table_name, bucket = store.dynamodb, store.s3, store.table, store.bucket
    body = b"x" * 2048
    item = {"pk": {"S": "CONV#raw"}, "sk": {"S": "META"}, "blob": {"S": "y" * 1000}}

    def get(i: int) -> Any:
        return ddb.get_item(
            TableName=table_name, Key={"pk": item["pk"], "sk": item["sk"]}, ConsistentRead=True
        )

    def update(i: int) -> Any:
        return ddb.update_item(
            TableName=table_name,
            Key={"pk": item["pk"], "sk": item["sk"]},
            UpdateExpression="SET #n = :n, status_key = :k, last_activity_ms = :t",
            ConditionExpression="attribute_not_exists(#n) OR #n < :n",
            ExpressionAttributeNames={"#n": "n"},
            ExpressionAttributeValues={
                ":n": {"N": str(i + 1_000_000 * (1 + int(time.time())))},
                ":k": {"S": f"running#{i % 16:03d}"},
                ":t": {"N": str(i)},
            },
            ReturnValues="ALL_NEW",
        )

    def put(i: int) -> Any:
        return ddb.put_item(
            TableName=table_name, Item={**item, "pk": {"S": f"CONV#raw{i}"}, "sk": {"S": "ITEM"}}
        )

    def query(i: int) -> Any:  # a thread's latest items, as the history read asks
        return ddb.query(
            TableName=table_name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": "CONV#history"}},
            ScanIndexForward=False,
            ConsistentRead=True,
            Limit=61,
        )

    def query_index(i: int) -> Any:
        return ddb.query(
            TableName=table_name,
            IndexName="by_status_shard",
            KeyConditionExpression="status_key = :k",
            ExpressionAttributeValues={":k": {"S": f"running#{i % 16:03d}"}},
            Limit=100,
        )

    def transact(i: int) -> Any:
        return ddb.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": table_name,
                        "Key": {"pk": item["pk"], "sk": item["sk"]},
                        "UpdateExpression": "SET #m = :m",
                        "ExpressionAttributeNames": {"#m": "m"},
                        "ExpressionAttributeValues": {":m": {"N": str(i)}},
                    }
                },
                {
                    "Put": {
                        "TableName": table_name,
                        "Item": {**item, "sk": {"S": f"ITEM#{uuid.uuid4().hex}"}},
                        "ConditionExpression": "attribute_not_exists(sk)",
                    }
                },
            ],
            ClientRequestToken=uuid.uuid4().hex,
        )

    def batch(i: int) -> Any:
        return ddb.batch_write_item(
            RequestItems={
                table_name: [
                    {"PutRequest": {"Item": {**item, "sk": {"S": f"B#{i}#{j}"}}}} for j in range(2)
                ]
            }
        )

    def put_object(i: int) -> Any:
        return s3.put_object(
            Bucket=bucket, Key=f"raw/{uuid.uuid4().hex}", Body=body, IfNoneMatch="*"
        )

    def get_object(i: int) -> Any:
        return s3.get_object(Bucket=bucket, Key="raw/fixed")["Body"].read()

    s3.put_object(Bucket=bucket, Key="raw/fixed", Body=body)
    put(0)
    for sk in ("ITEM#1", "ITEM#2", "ITEM#3", "META"):  # a short thread: three items, a record
        ddb.put_item(
            TableName=table_name, Item={**item, "pk": {"S": "CONV#history"}, "sk": {"S": sk}}
        )
    return {
        "dynamodb.GetItem": get,
        "dynamodb.UpdateItem": update,
        "dynamodb.PutItem": put,
        "dynamodb.Query": query,
        "dynamodb.Query(index)": query_index,
        "dynamodb.TransactWriteItems": transact,
        "dynamodb.BatchWriteItem": batch,
        "s3.PutObject": put_object,
        "s3.GetObject": get_object,
    }


def raw_requests(emulators: Emulators) -> tuple[AwsStore, dict[str, Callable[[int], Any]]]:
    """One request of each kind, on a fresh table and bucket of their own (close the store)."""
    store = emulators.store("raw")
    return store, _requests(store)


def warm(emulators: Emulators, rounds: int = 400) -> float:
    """Drive every kind of request until the emulators are warm; returns seconds spent."""
    start = time.perf_counter()
    store = emulators.store("warm")
    calls = _requests(store)
    for i in range(rounds):
        for call in calls.values():
            call(i)
    store.close()
    return time.perf_counter() - start


def measure_raw(emulators: Emulators, samples: int = 300) -> dict[str, tuple[float, float]]:
    """p50 and p99 of each kind of request, interleaved so that noise hits all alike."""
    store, calls = raw_requests(emulators)
    timings: dict[str, list[float]] = {kind: [] for kind in calls}
    for i in range(samples):
        for kind, call in calls.items():
            start = time.perf_counter()
            call(i)
            timings[kind].append((time.perf_counter() - start) * 1000)
    store.close()
    emulators.raw_ms = {
        kind: (percentile(values, 50), percentile(values, 99)) for kind, values in timings.items()
    }
    return emulators.raw_ms


def raw_table(emulators: Emulators) -> str:
    rows = [
        [kind.replace("dynamodb.", "DynamoDB ").replace("s3.", "S3 "), f"{p50:.2f}", f"{p99:.2f}"]
        for kind, (p50, p99) in emulators.raw_ms.items()
    ]
    return table(["request (one, on the store's client)", "p50 ms", "p99 ms"], rows)
