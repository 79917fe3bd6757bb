"""The sharded status index spreads conversations over many partition key values: with
thousands of running conversations, every shard is used and none holds much more than its
share, so no index partition takes a hot share of the writes (see docs/scale.md)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from storage import ConversationKey, Status
from storage.aws import AwsStore, create_resources
from storage.aws.layout import STATUS_INDEX

CONVERSATIONS = 2000
SHARDS = 16


@pytest.fixture
def aws_store(aws_services: dict[str, str]) -> Iterator[AwsStore]:
    name = f"spread-{uuid.uuid4().hex[:10]}"
    create_resources(name, name)
    store = AwsStore(name, name, status_shards=SHARDS)
    yield store
    store.close()


def index_counts(store: AwsStore) -> Counter[str]:
    """Index entries per partition key value, read from the index itself."""
    counts: Counter[str] = Counter()
    paginator = store.dynamodb.get_paginator("scan")
    for page in paginator.paginate(
        TableName=store.table, IndexName=STATUS_INDEX, ProjectionExpression="status_key"
    ):
        for item in page["Items"]:
            counts[item["status_key"]["S"]] += 1
    return counts


def test_thousands_of_conversations_spread_over_the_index(aws_store: AwsStore) -> None:
    keys = [
        ConversationKey(team="T1", channel=f"C{n % 37:03d}", thread_ts=f"17000{n:05d}.000100")
        for n in range(CONVERSATIONS)
    ]

    def keep(key: ConversationKey) -> None:
        aws_store.enqueue(key, f"ev-{key.thread_ts}", '{"user":"U","text":"hi"}')

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(keep, keys))

    counts = index_counts(aws_store)
    assert sum(counts.values()) == CONVERSATIONS
    assert set(counts) == {f"running#{shard:03d}" for shard in range(SHARDS)}
    largest = max(counts.values()) / CONVERSATIONS
    assert largest <= 1.5 / SHARDS, counts  # a fair share is 1/16 = 6.25%

    # Idle conversations leave the index: released idle, they are no longer in it.
    for key in keys[:100]:
        lease, _ = aws_store.acquire(key, f"o-{key.thread_ts}", create=False)
        aws_store.release(lease, status=Status.IDLE)
    assert sum(index_counts(aws_store).values()) == CONVERSATIONS - 100
