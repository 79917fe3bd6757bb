"""The fault proxy (testkit.faultproxy) in front of DynamoDB Local and moto S3, driven with
real boto3 clients configured like the application's (`standard` retries with
`max_attempts=5`, which botocore reads as 5 retries: 6 attempts in all): a
fault the retries absorb, one that outlasts them, a write that landed although the client
saw an error, and the application's own store through the proxy."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError
from botocore.retries.standard import ExponentialBackoff

from storage import CheckpointMeta, ConversationKey
from storage.aws import AwsStore, create_resources
from storage.errors import StorageUnavailable
from testkit.faultproxy import FaultControl, FaultProxy

STANDARD = Config(retries={"mode": "standard", "max_attempts": 5})
ONE_ATTEMPT = Config(retries={"mode": "standard", "total_max_attempts": 1})


@pytest.fixture(autouse=True)
def quick_throttling_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore waits up to 1, 2, 4, 8, 16 s between throttled attempts (15 s on average
    for five retries): scale it to 10 ms. The number of attempts is unchanged."""
    config = ExponentialBackoff._DEFAULT_BACKOFF_CONFIG  # type: ignore[attr-defined]
    monkeypatch.setitem(config, "throttling_base_scale", 0.01)


@pytest.fixture
def dynamodb_proxy(aws_services: dict[str, str]) -> Iterator[FaultProxy]:
    with FaultProxy(aws_services["AWS_ENDPOINT_URL_DYNAMODB"], "dynamodb", seed=7) as proxy:
        yield proxy


@pytest.fixture
def s3_proxy(aws_services: dict[str, str]) -> Iterator[FaultProxy]:
    with FaultProxy(aws_services["AWS_ENDPOINT_URL_S3"], "s3", seed=7) as proxy:
        yield proxy


@pytest.fixture
def table(aws_services: dict[str, str]) -> str:
    name = f"fp-{uuid.uuid4().hex[:10]}"
    client = boto3.client("dynamodb", endpoint_url=aws_services["AWS_ENDPOINT_URL_DYNAMODB"])
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


@pytest.fixture
def bucket(aws_services: dict[str, str]) -> str:
    name = f"fp-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=aws_services["AWS_ENDPOINT_URL_S3"]).create_bucket(Bucket=name)
    return name


def dynamodb(proxy: FaultProxy, config: Config = STANDARD) -> Any:
    return boto3.client("dynamodb", endpoint_url=proxy.url, config=config)


def s3(proxy: FaultProxy, config: Config = STANDARD) -> Any:
    return boto3.client("s3", endpoint_url=proxy.url, config=config)


def item(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "v": {"N": "1"}}


def test_passes_through_and_counts_by_operation(dynamodb_proxy: FaultProxy, table: str) -> None:
    client = dynamodb(dynamodb_proxy)
    client.put_item(TableName=table, Item=item("a"))
    found = client.get_item(TableName=table, Key={"pk": {"S": "a"}}, ConsistentRead=True)
    assert found["Item"]["v"] == {"N": "1"}
    assert dynamodb_proxy.requests["PutItem"] == 1
    assert dynamodb_proxy.requests["GetItem"] == 1
    assert not dynamodb_proxy.faulted


def test_throttling_absorbed_by_retries(dynamodb_proxy: FaultProxy, table: str) -> None:
    client = dynamodb(dynamodb_proxy)
    with dynamodb_proxy.fault("throttle", times=2, operation="PutItem") as fault:
        response = client.put_item(TableName=table, Item=item("b"))
    assert response["ResponseMetadata"]["RetryAttempts"] == 2
    assert fault.hits == 2
    assert dynamodb_proxy.requests["PutItem"] == 3
    assert dynamodb_proxy.faulted == {"PutItem:throttle": 2}


def test_throttling_that_outlasts_the_retries(dynamodb_proxy: FaultProxy, table: str) -> None:
    client = dynamodb(dynamodb_proxy)
    dynamodb_proxy.inject("throttle", times=6)
    with pytest.raises(ClientError) as failure:
        client.put_item(TableName=table, Item=item("c"))
    error = failure.value.response
    assert error["Error"]["Code"] == "ThrottlingException"
    assert error["Error"]["Message"] == "Rate exceeded"
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["ResponseMetadata"]["HTTPHeaders"]["x-amzn-errortype"] == "ThrottlingException"
    assert dynamodb_proxy.requests["PutItem"] == 6  # every attempt was throttled
    assert "Item" not in client.get_item(TableName=table, Key={"pk": {"S": "c"}})


def test_fault_only_for_one_operation(dynamodb_proxy: FaultProxy, table: str) -> None:
    client = dynamodb(dynamodb_proxy, ONE_ATTEMPT)
    dynamodb_proxy.inject("throttle", times=1, operation="TransactWriteItems")
    client.put_item(TableName=table, Item=item("d"))  # not the filtered operation
    write = [{"Put": {"TableName": table, "Item": item("e")}}]
    with pytest.raises(ClientError, match="ThrottlingException"):
        client.transact_write_items(TransactItems=write)
    client.transact_write_items(TransactItems=write)  # the next one passes
    assert dynamodb_proxy.faulted == {"TransactWriteItems:throttle": 1}
    assert dynamodb_proxy.requests["TransactWriteItems"] == 2


def test_write_landed_but_the_client_saw_a_dropped_connection(
    dynamodb_proxy: FaultProxy, table: str
) -> None:
    """`drop_after`: the first attempt is applied, its answer is lost, and the retry of a
    conditional write then fails against the client's own write: why writes need to be
    idempotent."""
    client = dynamodb(dynamodb_proxy)
    dynamodb_proxy.inject("drop_after", times=1, operation="PutItem")
    with pytest.raises(ClientError) as failure:
        client.put_item(
            TableName=table, Item=item("f"), ConditionExpression="attribute_not_exists(pk)"
        )
    assert failure.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert dynamodb_proxy.requests["PutItem"] == 2
    assert "Item" in client.get_item(TableName=table, Key={"pk": {"S": "f"}}, ConsistentRead=True)


def test_dropped_before_forwarding_is_retried_and_lands_once(
    dynamodb_proxy: FaultProxy, table: str
) -> None:
    dynamodb_proxy.inject("drop_before", times=1)
    client = dynamodb(dynamodb_proxy)
    client.put_item(TableName=table, Item=item("g"), ConditionExpression="attribute_not_exists(pk)")
    assert dynamodb_proxy.requests["PutItem"] == 2
    with pytest.raises(ConnectionClosedError):
        dynamodb_proxy.inject("drop_before", times=1)
        dynamodb(dynamodb_proxy, ONE_ATTEMPT).get_item(TableName=table, Key={"pk": {"S": "g"}})


def test_server_errors_for_a_while_and_latency(dynamodb_proxy: FaultProxy, table: str) -> None:
    client = dynamodb(dynamodb_proxy, ONE_ATTEMPT)
    dynamodb_proxy.inject("error500", seconds=0.5)
    with pytest.raises(ClientError) as failure:
        client.put_item(TableName=table, Item=item("h"))
    assert failure.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    time.sleep(0.6)  # the window has closed
    dynamodb_proxy.inject("delay", latency=0.3, times=1)
    started = time.monotonic()
    client.put_item(TableName=table, Item=item("h"))
    assert time.monotonic() - started >= 0.3


def test_fault_with_a_probability(dynamodb_proxy: FaultProxy, table: str) -> None:
    client = dynamodb(dynamodb_proxy, ONE_ATTEMPT)
    dynamodb_proxy.inject("error503", probability=0.5)
    failed = 0
    for number in range(20):
        try:
            client.put_item(TableName=table, Item=item(f"p{number}"))
        except ClientError as exc:
            assert exc.response["ResponseMetadata"]["HTTPStatusCode"] == 503
            failed += 1
    assert 0 < failed < 20
    assert dynamodb_proxy.faulted["PutItem:error503"] == failed


def test_s3_slowdown_absorbed_then_outlasting(s3_proxy: FaultProxy, bucket: str) -> None:
    client = s3(s3_proxy)
    with s3_proxy.fault("throttle", times=2, operation="PutObject"):
        client.put_object(Bucket=bucket, Key="k/one", Body=b"12345")
    assert s3_proxy.requests["PutObject"] == 3
    head = client.head_object(Bucket=bucket, Key="k/one")  # HEAD keeps its Content-Length
    assert head["ContentLength"] == 5
    s3_proxy.inject("throttle", times=6, method="PUT")
    with pytest.raises(ClientError) as failure:
        client.put_object(Bucket=bucket, Key="k/two", Body=b"x")
    assert failure.value.response["Error"]["Code"] == "SlowDown"
    assert failure.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert client.get_object(Bucket=bucket, Key="k/one")["Body"].read() == b"12345"


def test_s3_write_once_retried_after_a_lost_answer(s3_proxy: FaultProxy, bucket: str) -> None:
    client = s3(s3_proxy)
    s3_proxy.inject("drop_after", times=1, operation="PutObject")
    with pytest.raises(ClientError) as failure:
        client.put_object(Bucket=bucket, Key="once", Body=b"data", IfNoneMatch="*")
    assert failure.value.response["Error"]["Code"] == "PreconditionFailed"
    assert client.get_object(Bucket=bucket, Key="once")["Body"].read() == b"data"


def test_steered_from_another_process_over_http(dynamodb_proxy: FaultProxy, table: str) -> None:
    control = FaultControl(dynamodb_proxy.url)
    fault_id = control.inject("throttle", operation="GetItem")
    client = dynamodb(dynamodb_proxy, ONE_ATTEMPT)
    with pytest.raises(ClientError, match="ThrottlingException"):
        client.get_item(TableName=table, Key={"pk": {"S": "x"}})
    assert control.stats()["faults"][0]["id"] == fault_id
    control.heal()
    client.get_item(TableName=table, Key={"pk": {"S": "x"}})
    assert control.stats()["faulted"] == {"GetItem:throttle": 1}


def test_application_store_through_the_proxy(
    aws_services: dict[str, str], dynamodb_proxy: FaultProxy, s3_proxy: FaultProxy
) -> None:
    """The store's commit (one TransactWriteItems) survives a throttled attempt; a throttle
    that outlasts the retries fails the commit and moves nothing."""
    suffix = uuid.uuid4().hex[:10]
    create_resources(f"fps-{suffix}", f"fps-{suffix}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_proxy.url)
        patch.setenv("AWS_ENDPOINT_URL_S3", s3_proxy.url)
        store = AwsStore(f"fps-{suffix}", f"fps-{suffix}", lease_duration=timedelta(seconds=30))
    key = ConversationKey(team="T1", channel="C1", thread_ts="1.1")
    meta = CheckpointMeta(schema_version="1", agent_fingerprint="f")
    lease, _ = store.acquire(key, "me")
    with dynamodb_proxy.fault("throttle", times=1, operation="TransactWriteItems"):
        done = store.commit(lease, state={"n": 1}, meta=meta, expected_version=0, items=['"a"'])
    assert done.checkpoint is not None and done.checkpoint.version == 1
    with (
        dynamodb_proxy.fault("throttle", operation="TransactWriteItems"),
        pytest.raises(StorageUnavailable, match="ThrottlingException"),
    ):
        store.commit(lease, state={"n": 2}, meta=meta, expected_version=1, items=['"b"'])
    record = store.get(key)
    assert record is not None and record.checkpoint_version == 1
    assert store.read_items(key).items == ['"a"']
    assert dynamodb_proxy.faulted["TransactWriteItems:throttle"] == 1 + 6
    store.close()


def test_a_keyed_call_started_again_through_a_transaction_conflict(
    aws_services: dict[str, str], dynamodb_proxy: FaultProxy
) -> None:
    """A transaction cancelled by a conflict (another write to the conversation's record at
    that moment) landed nothing: starting a keyed call again is then a failure to retry,
    not "its attempts are spent" (which would report it as outcome unknown after one
    attempt). The same for its completion."""
    suffix = uuid.uuid4().hex[:10]
    create_resources(f"fpc-{suffix}", f"fpc-{suffix}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_proxy.url)
        store = AwsStore(f"fpc-{suffix}", f"fpc-{suffix}", lease_duration=timedelta(seconds=30))
    key = ConversationKey(team="T1", channel="C1", thread_ts="1.2")
    lease, _ = store.acquire(key, "me")
    store.begin_tool_call(lease, "call-1", "charge", "{}")
    with (
        dynamodb_proxy.fault("conflict", times=1, operation="TransactWriteItems"),
        pytest.raises(StorageUnavailable, match="TransactionConflict"),
    ):
        store.retry_tool_call(lease, "call-1", max_attempts=3)
    assert dynamodb_proxy.faulted["TransactWriteItems:conflict"] == 1
    again = store.retry_tool_call(lease, "call-1", max_attempts=3)
    assert again is not None and again.attempts == 2
    with (
        dynamodb_proxy.fault("conflict", times=1, operation="TransactWriteItems"),
        pytest.raises(StorageUnavailable, match="TransactionConflict"),
    ):
        store.complete_tool_call(lease, "call-1", "charged")
    assert store.complete_tool_call(lease, "call-1", "charged") is True
    done = store.get_tool_call(key, "call-1")
    assert done is not None and done.output == "charged"
    store.close()
