"""The one bridge from async code to the store (`storage.calls`): the SDK session and the
lease keeper reach storage through it, so a throttling burst that outlasts boto3's own
retries is retried there too, as the runtime's calls are, instead of failing the run."""

from __future__ import annotations

import ast
import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.retries.standard import ExponentialBackoff

from storage import ConversationSession, StorageCalls, Store
from storage.aws import create_resources
from storage.lease import LeaseKeeper
from testkit.faultproxy import FaultProxy
from tests.conftest import Backend
from tests.storage.conftest import KEY

BOTO_ATTEMPTS = 5  # storage.aws.store.CLIENT_CONFIG
STOP = '{"kind":"stop","user":"U2"}'
ESCAPES = {"to_thread", "run_in_executor"}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def quick_throttling_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore waits up to 1, 2, 4, 8 s between throttled attempts: scale it to 10 ms."""
    config = ExponentialBackoff._DEFAULT_BACKOFF_CONFIG  # type: ignore[attr-defined]
    monkeypatch.setitem(config, "throttling_base_scale", 0.01)


@pytest.fixture
def throttled(
    aws_services: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[FaultProxy, Store]]:
    """An aws store whose DynamoDB requests pass through a fault proxy."""
    with FaultProxy(aws_services["AWS_ENDPOINT_URL_DYNAMODB"], "dynamodb", seed=3) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", proxy.url)
        suffix = uuid.uuid4().hex[:12]
        env = {"BOT_STORAGE": "aws", "BOT_TABLE": f"t-{suffix}", "BOT_BUCKET": f"b-{suffix}"}
        create_resources(env["BOT_TABLE"], env["BOT_BUCKET"])
        backend = Backend("aws", env)
        store = backend.open(lease_seconds=5, lease_skew_seconds=0.2)
        try:
            yield proxy, store
        finally:
            store.close()


async def test_a_session_read_outlasting_boto3s_retries_is_retried(
    throttled: tuple[FaultProxy, Store],
) -> None:
    proxy, store = throttled
    lease, _ = store.acquire(KEY, "w")
    session = ConversationSession(store, KEY, lease=lease, calls=StorageCalls(store))
    await session.add_items([{"role": "user", "content": "hello"}])
    with proxy.fault("throttle", times=BOTO_ATTEMPTS + 1) as fault:
        items = await ConversationSession(store, KEY, calls=StorageCalls(store)).get_items()
    assert items == [{"role": "user", "content": "hello"}]
    assert fault.hits == BOTO_ATTEMPTS + 1  # more than one boto3 call could absorb


async def test_a_renewal_outlasting_boto3s_retries_keeps_the_lease(
    throttled: tuple[FaultProxy, Store],
) -> None:
    """One renewal before the 5 s lease expires (at 3 s; the next beat, at 6 s, is too
    late: another replica could take the thread by then): retried by the bridge, the
    throttled renewal lands before the lease runs out."""
    proxy, store = throttled
    lease, _ = store.acquire(KEY, "w")
    keeper = LeaseKeeper(store, lease, interval=3, stop_poll=None, calls=StorageCalls(store))
    with proxy.fault("throttle", times=BOTO_ATTEMPTS + 1, operation="UpdateItem") as fault:
        async with keeper:
            await asyncio.sleep(4.5)
            assert keeper.lease.expires_at > lease.expires_at
            assert not keeper.lost.is_set()
    assert fault.hits == BOTO_ATTEMPTS + 1


def test_no_storage_call_leaves_async_code_but_through_the_bridge() -> None:
    """`asyncio.to_thread` in the runtime or storage would be a second way in, without the
    bridge's retries."""
    found = []
    for folder in ("bot/runtime", "storage"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Attribute) and node.attr in {
                    "to_thread",
                    "run_in_executor",
                }:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [f"storage/calls.py:{line}" for line in bridge_lines()]


def bridge_lines() -> list[int]:
    tree = ast.parse((ROOT / "storage/calls.py").read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "run_in_executor"
    ]
