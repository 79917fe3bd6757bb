"""Keep a lease alive while work runs: renew in the background, and stop the work the
moment the lease is lost (a holder that lost its lease must write nothing more)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import TracebackType

from storage.base import Store
from storage.calls import StorageCalls
from storage.errors import LeaseLost, StorageError
from storage.models import Lease

log = logging.getLogger(__name__)
STOP_CHECK = 2.0  # seconds between renewals, at most
STOP_POLL = 0.5  # seconds between looks for a stop asked from another replica


class LeaseKeeper:
    """`async with LeaseKeeper(store, lease) as keeper:` renews every third of the lease.
    `keeper.lost` is set, and `keeper.check()` raises `LeaseLost`, once renewal fails;
    `keeper.stop` is set once someone asked the run to stop: at once when asked in this
    process (`ask_stop`), else from a look at the record every `STOP_POLL` seconds (one
    small read, no write: the write cost of a running conversation stays the renewals')."""

    def __init__(
        self,
        store: Store,
        lease: Lease,
        *,
        interval: float | None = None,
        stop_poll: float | None = STOP_POLL,
        calls: StorageCalls | None = None,
    ) -> None:
        self.store = store
        self.calls = calls or StorageCalls(store)
        self.lease = lease
        self.interval = interval or min(store.lease_duration.total_seconds() / 3, STOP_CHECK)
        self.stop_poll = stop_poll
        self.lost = asyncio.Event()
        self.stop = asyncio.Event()  # someone asked the run to stop (`stop_by`)
        self.stop_by: str | None = None
        self._applied = 0  # stops applied so far: a look begun before one is out of date
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> LeaseKeeper:
        key = self.lease.key
        self._tasks = [asyncio.create_task(self._heartbeat(), name=f"lease {key}")]
        if self.stop_poll:
            self._tasks.append(asyncio.create_task(self._watch_stops(), name=f"stops {key}"))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def check(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(str(self.lease.key), self.lease.fence)

    def ask_stop(self, user: str) -> None:
        """The run under this lease should stop (learned from a renewal, or in process)."""
        self.stop_by = user
        self.stop.set()

    def stop_applied(self) -> None:
        """The stop was acted on (and its request cleared in the store): the next run is
        not stopped by it."""
        self._applied += 1
        self.stop_by = None
        self.stop.clear()

    def _learned_stop(self, user: str | None, applied: int) -> None:
        if user and not self.stop.is_set() and applied == self._applied:
            self.ask_stop(user)

    async def _watch_stops(self) -> None:
        assert self.stop_poll
        while not self.lost.is_set():
            await asyncio.sleep(self.stop_poll)
            applied = self._applied
            try:
                user = await self.calls(self.store.stop_requested, self.lease.key)
            except Exception:  # the renewal reports what matters; look again soon
                log.debug("looking for a stop on %s failed", self.lease.key, exc_info=True)
                continue
            self._learned_stop(user, applied)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                applied = self._applied
                self.lease = await self.calls(self.store.renew, self.lease)
                self._learned_stop(self.lease.stop_by, applied)
            except LeaseLost:
                log.warning("lease lost on %s (fence %s)", self.lease.key, self.lease.fence)
                self.lost.set()
                return
            except StorageError:
                log.exception("lease renewal failed on %s; retrying", self.lease.key)
            except Exception:  # a network blip: the next beat retries before expiry
                log.exception("lease renewal error on %s; retrying", self.lease.key)
