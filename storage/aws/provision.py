"""Create the table and bucket for development and tests (production uses `infra/`)."""

from __future__ import annotations

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
        {
            "IndexName": STATUS_INDEX,
            "KeySchema": [
                {"AttributeName": "status_key", "KeyType": "HASH"},
                {"AttributeName": "last_activity_ms", "KeyType": "RANGE"},
            ],
            # What lists and recovery read; not the inbox, history pointer or participants.
            "Projection": {
                "ProjectionType": "INCLUDE",
                "NonKeyAttributes": [a for a in INDEX_ATTRIBUTES if a not in ("pk", "sk")],
            },
        },
        {
            "IndexName": PLACE_INDEX,
            "KeySchema": [
                {"AttributeName": "place_key", "KeyType": "HASH"},
                {"AttributeName": "last_activity_ms", "KeyType": "RANGE"},
            ],
            # The same, and who took part: `/resume` lists a thread to them.
            "Projection": {
                "ProjectionType": "INCLUDE",
                "NonKeyAttributes": [a for a in PLACE_ATTRIBUTES if a not in ("pk", "sk")],
            },
        },
        {
            "IndexName": WAITING_INDEX,
            "KeySchema": [
                {"AttributeName": "waiting_ws", "KeyType": "HASH"},
                {"AttributeName": "waiting_sk", "KeyType": "RANGE"},
            ],
            # The same, and what the Home tab shows of each: the calls that wait are read
            # from the checkpoint the pointer names.
            "Projection": {
                "ProjectionType": "INCLUDE",
                "NonKeyAttributes": [a for a in WAITING_ATTRIBUTES if a not in ("pk", "sk")],
            },
        },
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
