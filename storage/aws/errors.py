"""AWS errors, translated: transient ones (throttling, 5xx, dropped or timed-out connections)
become `StorageUnavailable` once boto3's own retries are spent; callers never see botocore."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
)

from storage.errors import StorageError, StorageUnavailable

TRANSIENT_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "InternalServerError",
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeoutException",
        "TransactionInProgressException",
        "TransactionConflictException",
    }
)
TRANSIENT_REASONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)


def code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def landed(write: Callable[[], object]) -> bool:
    """Makes a conditional `write`: True when it landed, False when its condition did not
    hold; any other failure is raised."""
    try:
        write()
    except ClientError as exc:
        if code(exc) != "ConditionalCheckFailedException":
            raise
        return False
    return True


def reasons(exc: ClientError) -> list[dict[str, Any]]:
    """A cancelled transaction's reasons, one per action, in order."""
    found: list[Any] = list(exc.response.get("CancellationReasons", []))
    return [dict(reason) for reason in found]


def first_failed(exc: ClientError) -> bool:
    found = reasons(exc)
    return bool(found) and found[0].get("Code") == "ConditionalCheckFailed"


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionError | HTTPClientError):
        return True
    if isinstance(exc, ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code(exc) in TRANSIENT_CODES or status >= 500:
            return True
        if code(exc) == "TransactionCanceledException":
            return any(r.get("Code") in TRANSIENT_REASONS for r in reasons(exc))
    return False


def unavailable(exc: BaseException) -> StorageError | None:
    """A transient AWS failure, once boto3's own retries are spent: `StorageUnavailable`."""
    if isinstance(exc, ClientError | BotoCoreError) and is_transient(exc):
        return StorageUnavailable(f"{type(exc).__name__}: {exc}")
    return None
