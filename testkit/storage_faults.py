"""Storage faults from outside the application, for runtime tests on both backends: the
store's writes fail as a real backend's do. Locally another connection holds sqlite's write
lock (reads go on: WAL); on aws DynamoDB answers ThrottlingException to every
TransactWriteItems (through botocore's own event system, after boto3's retries).

    with failing_writes(store) as fault:
        fault.start()      # from now on, until `fault.heal()` (or `start(seconds)`)
        ...

(For faults in front of real DynamoDB Local and S3 over HTTP, see `faultproxy`.)"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import boto3

from storage import Store
from storage.aws import AwsStore
from storage.local import LocalStore

GIVES_UP = "storage unavailable, run stopped"  # `Serving._stopped_by_fault`'s log line
FAILING_BUSY_TIMEOUT = 0.05  # seconds a local write waits for the held lock before failing


class WriteFault:
    """Writes fail from `start()` until `heal()`, or for `seconds` when given."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._healed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._handler: Callable[..., Any] | None = None
        self._busy_timeout: float | None = None

    def start(self, seconds: float | None = None) -> None:
        self._healed.clear()
        if isinstance(self.store, LocalStore):
            self._hold_write_lock(self.store, seconds)
        else:
            assert isinstance(self.store, AwsStore)
            self._throttle_transactions(self.store, seconds)

    def heal(self) -> None:
        """Writes succeed again from now on (the lock is given back before this returns)."""
        self._healed.set()
        for thread in self._threads:
            thread.join(5)
        self._threads.clear()
        if self._handler is not None:
            assert isinstance(self.store, AwsStore)
            self.store.dynamodb.meta.events.unregister(
                "before-call.dynamodb.TransactWriteItems", self._handler
            )
            self._handler = None
        if self._busy_timeout is not None:
            assert isinstance(self.store, LocalStore)
            self.store.busy_timeout = self._busy_timeout
            self._busy_timeout = None

    def _hold_write_lock(self, store: LocalStore, seconds: float | None) -> None:
        if self._busy_timeout is None:
            self._busy_timeout = store.busy_timeout
        store.busy_timeout = FAILING_BUSY_TIMEOUT
        locked = threading.Event()

        def hold() -> None:
            db = sqlite3.connect(store.db_path, isolation_level=None)
            db.execute("BEGIN EXCLUSIVE")
            locked.set()
            self._healed.wait(seconds)
            db.execute("COMMIT")
            db.close()

        thread = threading.Thread(target=hold, daemon=True)
        thread.start()
        self._threads.append(thread)
        locked.wait(5)

    def _throttle_transactions(self, store: AwsStore, seconds: float | None) -> None:
        until = time.monotonic() + seconds if seconds is not None else None
        healed = self._healed

        def throttle(**kwargs: Any) -> Any:
            if healed.is_set() or (until is not None and time.monotonic() > until):
                return None
            return throttled()

        self._handler = throttle
        store.dynamodb.meta.events.register("before-call.dynamodb.TransactWriteItems", throttle)


@contextmanager
def failing_writes(store: Store) -> Iterator[WriteFault]:
    fault = WriteFault(store)
    try:
        yield fault
    finally:
        fault.heal()


@contextmanager
def healed_as_a_serve_gives_up(fault: WriteFault) -> Iterator[None]:
    """Heals `fault` the moment a serve gives up on storage (the error line it writes before
    it lets the thread go), so that its release lands: a fault that ends between a run's
    last retry and its release (as in chaos seed 130020)."""

    class Heal(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if GIVES_UP in record.getMessage():
                fault.heal()

    handler = Heal(logging.ERROR)
    serving_log = logging.getLogger("bot.runtime.serving")
    serving_log.addHandler(handler)
    try:
        yield
    finally:
        serving_log.removeHandler(handler)


@contextmanager
def storage_fault(store: Store, seconds: float) -> Iterator[Callable[[], None]]:
    """Yields `start()`: from then on, for `seconds`, the store's writes fail."""
    with failing_writes(store) as fault:
        yield lambda: fault.start(seconds)


class _Response:
    def __init__(self, status: int) -> None:
        self.status_code = status
        self.headers: dict[str, str] = {}
        self.content = b""
        self.raw = None


def throttled() -> tuple[_Response, dict[str, Any]]:
    """What a `before-call` handler returns for DynamoDB to answer ThrottlingException."""
    body = {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}
    return _Response(400), {**body, "ResponseMetadata": {"HTTPStatusCode": 400}}


def overwrite_blob(store: Store, object_key: str, data: bytes | None) -> None:
    """Damage (or plant, or with None delete) a stored object behind the store's back, as a
    disk or an operator might: the file itself locally, the S3 object on aws."""
    if isinstance(store, LocalStore):
        path = store.blobs.path(object_key)
        if data is None:
            os.unlink(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return
    assert isinstance(store, AwsStore)
    s3 = boto3.client("s3")
    if data is None:
        s3.delete_object(Bucket=store.bucket, Key=object_key)
    else:
        s3.put_object(Bucket=store.bucket, Key=object_key, Body=data)


def stored_blob(store: Store, object_key: str) -> bytes:
    """The stored object's bytes, read from outside the store."""
    if isinstance(store, LocalStore):
        return store.blobs.path(object_key).read_bytes()
    assert isinstance(store, AwsStore)
    body = boto3.client("s3").get_object(Bucket=store.bucket, Key=object_key)["Body"]
    return bytes(body.read())


@contextmanager
def failing_reads(store: AwsStore, key_prefix: str) -> Iterator[None]:
    """DynamoDB answers ThrottlingException to every GetItem of a key starting with
    `key_prefix` (after boto3's own retries the store reports itself unavailable)."""

    def throttle(params: dict[str, Any], **_: Any) -> Any:
        body = params.get("body", b"")  # the request as sent: its JSON names the key
        if f'"S": "{key_prefix}'.encode() not in body and f'"S":"{key_prefix}'.encode() not in body:
            return None
        return throttled()

    store.dynamodb.meta.events.register("before-call.dynamodb.GetItem", throttle)
    try:
        yield
    finally:
        store.dynamodb.meta.events.unregister("before-call.dynamodb.GetItem", throttle)
