"""Counting AWS requests from botocore events, on every client the process creates.

`install()` wraps `botocore.session.Session.create_client`, so that each DynamoDB and S3
client made afterwards (the store's, LangGraph's saver's, anything else) reports to one
`Meter`:

- `before-send` fires once per HTTP request (boto3's retries included): the request is
  counted with its service, operation and body size;
- `provide-client-params.dynamodb` adds `ReturnConsumedCapacity=INDEXES` to the operations
  that accept it (no production code asks for it), and `after-call.dynamodb` reads the
  capacity units back, for the table and each index. DynamoDB Local reports them.

Failed conditional writes come back as errors without `ConsumedCapacity`; they are counted
as requests (AWS bills them a write unit) but add no units here."""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import botocore.session

CAPACITY_OPERATIONS = frozenset(
    {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactWriteItems",
        "TransactGetItems",
    }
)
WRITES = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems", "PutObject"}
)


@dataclass
class Tally:
    """What a stretch of work sent to AWS."""

    requests: Counter[str] = field(default_factory=Counter)  # "dynamodb.UpdateItem" -> n
    bytes_sent: Counter[str] = field(default_factory=Counter)  # service -> request body bytes
    write_bytes: int = 0  # body bytes of write requests (DynamoDB writes, S3 PUTs)
    read_units: float = 0.0  # table + index read capacity units
    write_units: float = 0.0  # table write capacity units
    index_write_units: float = 0.0  # GSI write capacity units
    index_read_units: float = 0.0

    def count(self, service: str, operation: str | None = None) -> int:
        return sum(
            n
            for name, n in self.requests.items()
            if name.split(".")[0] == service and (operation is None or name.endswith(operation))
        )

    @property
    def dynamodb(self) -> int:
        return self.count("dynamodb")

    @property
    def s3(self) -> int:
        return self.count("s3")

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    def without(self, *names: str) -> Tally:
        """The same tally less some kinds of request (e.g. the recovery sweep's queries)."""
        kept = Tally(
            requests=Counter({k: v for k, v in self.requests.items() if k not in names}),
            bytes_sent=self.bytes_sent.copy(),
            write_bytes=self.write_bytes,
            read_units=self.read_units,
            write_units=self.write_units,
            index_write_units=self.index_write_units,
            index_read_units=self.index_read_units,
        )
        return kept

    def add(self, other: Tally) -> None:
        self.requests.update(other.requests)
        self.bytes_sent.update(other.bytes_sent)
        self.write_bytes += other.write_bytes
        self.read_units += other.read_units
        self.write_units += other.write_units
        self.index_write_units += other.index_write_units
        self.index_read_units += other.index_read_units

    def minus(self, other: Tally) -> Tally:
        return Tally(
            requests=self.requests - other.requests,
            bytes_sent=self.bytes_sent - other.bytes_sent,
            write_bytes=self.write_bytes - other.write_bytes,
            read_units=self.read_units - other.read_units,
            write_units=self.write_units - other.write_units,
            index_write_units=self.index_write_units - other.index_write_units,
            index_read_units=self.index_read_units - other.index_read_units,
        )

    def scaled(self, factor: float) -> dict[str, float]:
        """Per-unit figures (e.g. per turn) of the numeric fields."""
        return {
            "dynamodb": self.dynamodb * factor,
            "s3": self.s3 * factor,
            "s3_put": self.count("s3", "PutObject") * factor,
            "s3_get": self.count("s3", "GetObject") * factor,
            "write_bytes": self.write_bytes * factor,
            "rcu": self.read_units * factor,
            "wcu": self.write_units * factor,
            "gsi_wcu": self.index_write_units * factor,
        }

    def describe(self) -> str:
        """`UpdateItemx2, TransactWriteItems, PutObject` in a stable order."""
        parts = []
        for name in sorted(self.requests):
            n = self.requests[name]
            short = name.split(".", 1)[1]
            parts.append(short if n == 1 else f"{short}x{n}")
        return ", ".join(parts) or "none"


class Meter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total = Tally()
        self.clients = 0

    def attach(self, client: Any) -> None:
        service = client.meta.service_model.service_name
        events = client.meta.events
        events.register("before-send", functools.partial(self._sent, service))
        if service == "dynamodb":
            events.register("provide-client-params.dynamodb", self._ask_capacity)
            events.register("after-call.dynamodb", self._capacity)
        with self.lock:
            self.clients += 1

    def _sent(self, service: str, request: Any, event_name: str, **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        body = request.body
        size = len(body) if isinstance(body, bytes | bytearray | str) else 0
        if service == "s3" and size == 0 and request.headers.get("Content-Length"):
            size = int(request.headers["Content-Length"])
        if (
            service == "dynamodb"
            and operation == "Query"
            and isinstance(body, bytes)
            and b'"IndexName"' in body
        ):
            operation = "Query(index)"
        with self.lock:
            self.total.requests[f"{service}.{operation}"] += 1
            self.total.bytes_sent[service] += size
            if operation in WRITES:
                self.total.write_bytes += size

    def _ask_capacity(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name in CAPACITY_OPERATIONS and "ReturnConsumedCapacity" not in params:
            params["ReturnConsumedCapacity"] = "INDEXES"

    def _capacity(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        found = parsed.get("ConsumedCapacity")
        if found is None:
            return
        entries = found if isinstance(found, list) else [found]
        writing = model.name in WRITES
        read = write = index_read = index_write = 0.0
        for entry in entries:
            table = entry.get("Table") or {}
            indexes = (entry.get("GlobalSecondaryIndexes") or {}).values()
            table_units = _units(table, writing) if table else None
            index_units = sum(_units(index, writing) for index in indexes)
            if table_units is None:  # only a total was reported
                table_units = float(entry.get("CapacityUnits", 0)) - index_units
            if writing:
                write += table_units
                index_write += index_units
            else:
                read += table_units
                index_read += index_units
        with self.lock:
            self.total.read_units += read + index_read
            self.total.index_read_units += index_read
            self.total.write_units += write
            self.total.index_write_units += index_write

    def snapshot(self) -> Tally:
        with self.lock:
            copy = Tally()
            copy.add(self.total)
            return copy

    @contextmanager
    def measure(self) -> Iterator[Tally]:
        """The requests sent while the block runs (by anyone in the process)."""
        before = self.snapshot()
        tally = Tally()
        yield tally
        tally.add(self.snapshot().minus(before))


def _units(entry: dict[str, Any], writing: bool) -> float:
    """Capacity units of one table or index entry (DynamoDB Local reports `CapacityUnits`;
    AWS also splits them into read and write units)."""
    split = entry.get("WriteCapacityUnits" if writing else "ReadCapacityUnits")
    return float(split if split is not None else entry.get("CapacityUnits", 0))


METER = Meter()
_installed = False


def install() -> Meter:
    """Attach the meter to every botocore client created from now on (idempotent)."""
    global _installed
    if not _installed:
        original = botocore.session.Session.create_client

        @functools.wraps(original)
        def create_client(self: botocore.session.Session, *args: Any, **kwargs: Any) -> Any:
            client = original(self, *args, **kwargs)
            if client.meta.service_model.service_name in ("dynamodb", "s3"):
                METER.attach(client)
            return client

        botocore.session.Session.create_client = create_client  # type: ignore[method-assign]
        _installed = True
    return METER
