"""What a fault of the fault proxy (`testkit.faultproxy`) is: its action, which requests it
matches and for how long it lasts, and the API operation a request is (what `operation`
matches)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

Service = Literal["dynamodb", "s3"]
Action = Literal[
    "throttle", "error500", "error503", "drop_before", "drop_after", "delay", "conflict"
]
ACTIONS: tuple[Action, ...] = (
    "throttle",
    "error500",
    "error503",
    "drop_before",
    "drop_after",
    "delay",
    "conflict",
)


@dataclass
class Fault:
    """One scripted fault. `until` is a `time.monotonic()` deadline; `hits` counts the
    requests it was applied to."""

    action: Action
    times: int | None = None
    until: float | None = None
    probability: float = 1.0
    operation: str | None = None
    method: str | None = None
    latency: float = 0.0
    id: int = 0
    hits: int = 0

    def live(self, now: float) -> bool:
        return (self.times is None or self.hits < self.times) and (
            self.until is None or now < self.until
        )

    def matches(self, operation: str, method: str) -> bool:
        return (self.operation is None or self.operation == operation) and (
            self.method is None or self.method.upper() == method
        )

    def describe(self) -> dict[str, Any]:
        data = asdict(self)
        if self.until is not None:
            data["until"] = None
            data["seconds_left"] = round(max(0.0, self.until - time.monotonic()), 3)
        return data


def check_fault(action: Action, service: Service, latency: float) -> None:
    """Refuse (ValueError) a fault the proxy in front of `service` could not apply."""
    if action not in ACTIONS:
        raise ValueError(f"unknown fault action {action!r} (one of {', '.join(ACTIONS)})")
    if action == "delay" and latency <= 0:
        raise ValueError("a delay fault needs latency > 0")
    if action == "conflict" and service != "dynamodb":
        raise ValueError("a conflict fault is DynamoDB's (a cancelled transaction)")


def operation_of(service: Service, method: str, path: str, headers: Any, query: Any) -> str:
    """The API operation a request is: `PutItem`, `TransactWriteItems`, `PutObject`, ..."""
    if service == "dynamodb":
        target = str(headers.get("X-Amz-Target", ""))
        return target.rpartition(".")[2] or f"{method} {path}"
    parts = [part for part in path.split("/") if part]
    if len(parts) >= 2:
        return _object_operation(method, headers)
    if len(parts) == 1:
        return _bucket_operation(method, query)
    return "ListBuckets" if method == "GET" else f"{method} /"


def _object_operation(method: str, headers: Any) -> str:
    """An S3 request on `/bucket/key...`."""
    if method == "PUT" and "x-amz-copy-source" in headers:
        return "CopyObject"
    return {"GET": "GetObject", "PUT": "PutObject", "DELETE": "DeleteObject"}.get(
        method, f"{method.title()}Object"
    )


def _bucket_operation(method: str, query: Any) -> str:
    """An S3 request on `/bucket`."""
    if method == "POST" and "delete" in query:
        return "DeleteObjects"
    if method == "GET":
        return "ListObjectsV2" if query.get("list-type") == "2" else "ListObjects"
    return {"PUT": "CreateBucket", "DELETE": "DeleteBucket"}.get(method, f"{method.title()}Bucket")
