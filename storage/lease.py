"""Keep a lease alive while work runs: renew in the background, and stop the work the
moment the lease is lost (a holder that lost its lease must write nothing more)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import TracebackType

from storage.base import Store
from storage.errors import LeaseLost, StorageError
from storage.models import Lease

log = logging.getLogger(__name__)
STOP_CHECK = 2.0  # seconds


class LeaseKeeper:
    """`async with LeaseKeeper(store, lease) as keeper:` renews every third of the lease.
    `keeper.lost` is set, and `keeper.check()` raises `LeaseLost`, once renewal fails;
    `keeper.stop` is set once a renewal shows that someone asked the run to stop."""

    def __init__(self, store: Store, lease: Lease, *, interval: float | None = None) -> None:
        self.store = store
        self.lease = lease
        # Every third of the lease, and at least every 2 s: a stop asked by someone on another
        # replica is learned from a renewal.
        self.interval = interval or min(store.lease_duration.total_seconds() / 3, STOP_CHECK)
        self.lost = asyncio.Event()
        self.stop = asyncio.Event()  # someone asked the run to stop (`stop_by`)
        self.stop_by: str | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LeaseKeeper:
        self._task = asyncio.create_task(self._heartbeat(), name=f"lease {self.lease.key}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def check(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(str(self.lease.key), self.lease.fence)

    def ask_stop(self, user: str) -> None:
        """The run under this lease should stop (learned from a renewal, or in process)."""
        self.stop_by = user
        self.stop.set()

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.lease = await asyncio.to_thread(self.store.renew, self.lease)
                if self.lease.stop_by and not self.stop.is_set():
                    self.ask_stop(self.lease.stop_by)
            except LeaseLost:
                log.warning("lease lost on %s (fence %s)", self.lease.key, self.lease.fence)
                self.lost.set()
                return
            except StorageError:
                log.exception("lease renewal failed on %s; retrying", self.lease.key)
            except Exception:  # a network blip: the next beat retries before expiry
                log.exception("lease renewal error on %s; retrying", self.lease.key)
