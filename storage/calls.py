"""The one bridge from async code to the (synchronous) store, the runtime's and the
session's and lease keeper's alike: off the event loop (on a pool sized for I/O, not for the
CPU count) unless the store can make the call at once on it (`Store.run_here`), typed end
to end, and with transient failures (`StorageUnavailable`) retried with
backoff before they reach the caller. Every storage operation is safe to repeat: writes
carry idempotency tokens or recognise their own earlier effect."""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from storage.base import Store
from storage.errors import StorageUnavailable, WouldWait

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")
IO_THREADS = 32
URGENT_THREADS = 8  # for keeps, which a Slack request waits on before it is acknowledged


class StorageCalls:
    def __init__(self, store: Store, *, attempts: int = 4, first_delay: float = 0.2) -> None:
        self.store = store
        self.attempts = attempts
        self.first_delay = first_delay
        self.pool = ThreadPoolExecutor(max_workers=IO_THREADS, thread_name_prefix="storage")
        self.urgent_pool = ThreadPoolExecutor(
            max_workers=URGENT_THREADS, thread_name_prefix="storage-ack"
        )

    async def __call__(self, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`function(*args, **kwargs)` in a worker thread; retried while storage is
        unavailable (boto3 has already retried quickly underneath), then raised."""
        return await self._run(self.pool, functools.partial(function, *args, **kwargs))

    async def urgent(self, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """The same, on threads of their own: a keep that a Slack request waits on does not
        queue behind the storage calls of the runs in progress."""
        return await self._run(self.urgent_pool, functools.partial(function, *args, **kwargs))

    async def _run(self, pool: ThreadPoolExecutor, call: Callable[[], R]) -> R:
        function = getattr(call, "func", call)
        delay = self.first_delay
        for attempt in range(1, self.attempts + 1):
            try:
                return await self._here_or_on(pool, call)
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

    async def once(self, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """One attempt, not retried: for a probe whose caller wants the store's state now."""
        return await self._here_or_on(self.pool, functools.partial(function, *args, **kwargs))

    async def _here_or_on(self, pool: ThreadPoolExecutor, call: Callable[[], R]) -> R:
        """On this thread when the store can make the call at once (`Store.run_here`: an
        embedded store's quick calls), else on `pool`."""
        try:
            return self.store.run_here(call)
        except WouldWait:
            return await asyncio.get_running_loop().run_in_executor(pool, call)

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        self.urgent_pool.shutdown(wait=False)
