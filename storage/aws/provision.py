"""Create the table and bucket for development and tests (production uses `infra/`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import boto3
from botocore.exceptions import ClientError

from storage.aws.layout import (
    INDEX_ATTRIBUTES,
    PLACE_ATTRIBUTES,
    PLACE_INDEX,
    STATUS_INDEX,
    WAITING_ATTRIBUTES,
    WAITING_INDEX,
)


def _index(name: str, keys: tuple[str, str], attributes: Sequence[str]) -> dict[str, Any]:
    """A global secondary index on (hash, range) `keys`, projecting `attributes`."""
    hash_key, range_key = keys
    return {
        "IndexName": name,
        "KeySchema": [
            {"AttributeName": hash_key, "KeyType": "HASH"},
            {"AttributeName": range_key, "KeyType": "RANGE"},
        ],
        "Projection": {
            "ProjectionType": "INCLUDE",
            "NonKeyAttributes": [a for a in attributes if a not in ("pk", "sk")],
        },
    }


TTL_ATTRIBUTE = "expires_at"
# The table as the code uses it; infra/template.yaml must declare the same (a test checks).
TABLE_DEFINITION: dict[str, Any] = {
    "AttributeDefinitions": [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
        {"AttributeName": "status_key", "AttributeType": "S"},
        {"AttributeName": "last_activity_ms", "AttributeType": "N"},
        {"AttributeName": "place_key", "AttributeType": "S"},
        {"AttributeName": "waiting_ws", "AttributeType": "S"},
        {"AttributeName": "waiting_sk", "AttributeType": "S"},
    ],
    "KeySchema": [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ],
    "GlobalSecondaryIndexes": [
        # What lists and recovery read; not the inbox, history pointer or participants.
        _index(STATUS_INDEX, ("status_key", "last_activity_ms"), INDEX_ATTRIBUTES),
        # The same, and who took part: `/resume` lists a thread to them.
        _index(PLACE_INDEX, ("place_key", "last_activity_ms"), PLACE_ATTRIBUTES),
        # The same, and what the Home tab shows of each: the calls that wait are read
        # from the checkpoint the pointer names.
        _index(WAITING_INDEX, ("waiting_ws", "waiting_sk"), WAITING_ATTRIBUTES),
    ],
}


def create_resources(table: str, bucket: str) -> list[str]:
    """Create what is missing; returns what was created. Idempotent."""
    session = boto3.session.Session()
    created = []
    if _create_table(session.client("dynamodb"), table):
        created.append(f"table {table}")
    if _create_bucket(session.client("s3"), bucket, session.region_name):
        created.append(f"bucket {bucket}")
    return created


def _create_table(dynamodb: object, table: str) -> bool:
    client = dynamodb  # typed loosely: boto3 clients are generated at run time
    try:
        client.create_table(  # type: ignore[attr-defined]
            TableName=table, BillingMode="PAY_PER_REQUEST", **TABLE_DEFINITION
        )
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceInUseException":
            raise
        return False
    client.get_waiter("table_exists").wait(  # type: ignore[attr-defined]
        TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )
    client.update_time_to_live(  # type: ignore[attr-defined]
        TableName=table,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
    )
    return True


def _create_bucket(s3: object, bucket: str, region: str | None) -> bool:
    try:
        s3.head_bucket(Bucket=bucket)  # type: ignore[attr-defined]
        return False  # us-east-1 answers 200 to re-creating your own bucket: ask first
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("404", "NoSuchBucket"):
            raise
    options: dict[str, object] = {"Bucket": bucket}
    if region and region != "us-east-1":
        options["CreateBucketConfiguration"] = {"LocationConstraint": region}
    try:
        s3.create_bucket(**options)  # type: ignore[attr-defined]
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
        return False
    return True
