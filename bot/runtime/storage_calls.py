"""The store as the runtime uses it: off the event loop, typed end to end, and with transient
failures (`StorageUnavailable`) retried with backoff before they reach the caller. Every
storage operation is safe to repeat: writes carry idempotency tokens or recognise their own
earlier effect."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from storage import StorageUnavailable, Store

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")


class StorageCalls:
    def __init__(self, store: Store, *, attempts: int = 4, first_delay: float = 0.2) -> None:
        self.store = store
        self.attempts = attempts
        self.first_delay = first_delay

    async def __call__(self, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`function(*args, **kwargs)` in a worker thread; retried while storage is
        unavailable (boto3 has already retried quickly underneath), then raised."""
        delay = self.first_delay
        for attempt in range(1, self.attempts + 1):
            try:
                return await asyncio.to_thread(function, *args, **kwargs)
            except StorageUnavailable as exc:
                if attempt == self.attempts:
                    raise
                log.warning(
                    "storage unavailable (%s, attempt %d of %d): %s",
                    getattr(function, "__name__", "call"),
                    attempt,
                    self.attempts,
                    exc,
                )
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay *= 2
        raise AssertionError("unreachable")
