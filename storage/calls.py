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
from typing import Any, ParamSpec, TypeVar

from storage.base import Store
from storage.errors import StorageUnavailable, WouldWait

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")
IO_THREADS = 32
GROUP_LIMIT = 64  # urgent calls in one write: 64 keeps hold the loop about 4.5 ms here
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
        self.together = Together(store)

    async def __call__(self, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`function(*args, **kwargs)` in a worker thread; retried while storage is
        unavailable (boto3 has already retried quickly underneath), then raised."""
        return await self._run(self.pool, functools.partial(function, *args, **kwargs))

    async def urgent(self, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """The same, on threads of their own: a keep that a Slack request waits on does not
        queue behind the storage calls of the runs in progress. Where the store can make
        them on the loop, the urgent calls of one pass of the loop (a burst's requests) are
        made together, one write and one fsync for all (`Store.run_together`)."""
        call = functools.partial(function, *args, **kwargs)
        if not self.store.runs_calls_here:
            return await self._run(self.urgent_pool, call)
        try:
            return await self.together.add(call)
        except (WouldWait, StorageUnavailable):
            # Not made here, or not made at all: alone, as any call (each is safe to repeat).
            return await self._run(self.urgent_pool, call)

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


class Together:
    """Calls gathered over one pass of the event loop and made together at its end
    (`Store.run_together`), each caller given its own outcome; `WouldWait` to each when
    they cannot be made on the loop. At most `GROUP_LIMIT` in one write, so that a group
    holds the loop a few milliseconds at most."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.waiting: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []

    def add(self, call: Callable[[], R]) -> asyncio.Future[R]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self.waiting.append((call, future))
        if len(self.waiting) == 1:
            loop.call_soon(self._make)
        return future

    def _make(self) -> None:
        group, self.waiting = self.waiting[:GROUP_LIMIT], self.waiting[GROUP_LIMIT:]
        if self.waiting:
            asyncio.get_running_loop().call_soon(self._make)
        try:
            if len(group) == 1:  # alone: no savepoint needed
                outcomes: list[Any] = [_outcome(self.store.run_here, group[0][0])]
            else:
                outcomes = self.store.run_together([call for call, _ in group])
        except Exception as exc:  # WouldWait: none made here; or none made at all
            outcomes = [exc] * len(group)
        for (_, future), outcome in zip(group, outcomes, strict=True):
            if future.done():  # its caller was cancelled meanwhile
                continue
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)


def _outcome(run: Callable[[Callable[[], R]], R], call: Callable[[], R]) -> R | Exception:
    """`run(call)`'s result, or the contract's error it raised (`WouldWait` raised on)."""
    try:
        return run(call)
    except WouldWait:
        raise
    except Exception as exc:
        return exc
