"""sqlite's and the blob directory's errors, translated: transient ones become
`StorageUnavailable`; callers never see sqlite3 or the file system."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from storage.errors import StorageUnavailable

P = ParamSpec("P")
R = TypeVar("R")


def translated(method: Callable[P, R]) -> Callable[P, R]:
    """sqlite's transient failures (a locked or read-only database, an I/O error) become
    `StorageUnavailable`; the contract's own errors pass through."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except sqlite3.OperationalError as exc:
            raise StorageUnavailable(f"sqlite: {exc}") from exc
        except OSError as exc:  # the blob directory: read-only, full, I/O error
            raise StorageUnavailable(f"blobs: {exc}") from exc

    return wrapper
