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


class LeaseKeeper:
    """`async with LeaseKeeper(store, lease) as keeper:` renews every third of the lease.
    `keeper.lost` is set, and `keeper.check()` raises `LeaseLost`, once renewal fails."""

    def __init__(self, store: Store, lease: Lease, *, interval: float | None = None) -> None:
        self.store = store
        self.lease = lease
        self.interval = interval or store.lease_duration.total_seconds() / 3
        self.lost = asyncio.Event()
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

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.lease = await asyncio.to_thread(self.store.renew, self.lease)
            except LeaseLost:
                log.warning("lease lost on %s (fence %s)", self.lease.key, self.lease.fence)
                self.lost.set()
                return
            except StorageError:
                log.exception("lease renewal failed on %s; retrying", self.lease.key)
            except Exception:  # a network blip: the next beat retries before expiry
                log.exception("lease renewal error on %s; retrying", self.lease.key)
