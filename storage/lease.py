"""Keep a lease alive while work runs: renew in the background, and stop the work the
moment the lease is lost (a holder that lost its lease must write nothing more)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any

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
        # A run is in progress (`working_turn`): renewals keep its state alive, since a
        # run that commits only now and then can outlast a short `BOT_STATE_TTL`.
        self._working = False
        self._stop_waiters: list[asyncio.Future[None]] = []  # `when_stop_asked`
        self._applied = 0  # stops applied so far: a look begun before one is out of date
        self._tasks: list[asyncio.Task[None]] = []
        # Most holds end before their first renewal: each loop's task is made when its
        # first beat is due (a timer until then costs next to nothing to set and cancel).
        self._timers: list[asyncio.TimerHandle] = []

    async def __aenter__(self) -> LeaseKeeper:
        loop = asyncio.get_running_loop()
        name = str(self.lease.key)
        self._timers = [loop.call_later(self.interval, self._begin, self._heartbeat, name)]
        if self.stop_poll:
            self._timers.append(
                loop.call_later(self.stop_poll, self._begin, self._watch_stops, name)
            )
        return self

    def _begin(self, beats: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        self._tasks.append(asyncio.create_task(beats(), name=f"{beats.__name__} {name}"))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for timer in self._timers:
            timer.cancel()
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
        waiters, self._stop_waiters = self._stop_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def when_stop_asked(self) -> asyncio.Future[None]:
        """A future done once a stop is asked (at once if one is): `stop.wait()` without a
        task of its own, for `asyncio.wait` beside the work. Cancel it when done with it."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.stop.is_set():
            waiter.set_result(None)
        else:
            self._stop_waiters = [w for w in self._stop_waiters if not w.done()]
            self._stop_waiters.append(waiter)
        return waiter

    @property
    def working(self) -> bool:
        return self._working

    @contextlib.contextmanager
    def working_turn(self) -> Iterator[None]:
        """Held while a run is driven: the one place the flag is set and cleared, so that
        no path out of the run (a return, a fault, a cancellation) leaves it set."""
        self._working = True
        try:
            yield
        finally:
            self._working = False

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
        """From its first look (due when the task begins), one every `stop_poll`."""
        assert self.stop_poll
        while not self.lost.is_set():
            applied = self._applied
            try:
                user = await self.calls(self.store.stop_requested, self.lease.key)
            except Exception:  # the renewal reports what matters; look again soon
                log.debug("looking for a stop on %s failed", self.lease.key, exc_info=True)
            else:
                self._learned_stop(user, applied)
            await asyncio.sleep(self.stop_poll)

    async def _heartbeat(self) -> None:
        """From its first renewal (due when the task begins), one every `interval`."""
        while True:
            try:
                applied = self._applied
                self.lease = await self.calls(self.store.renew, self.lease, working=self._working)
                self._learned_stop(self.lease.stop_by, applied)
            except LeaseLost:
                log.warning("lease lost on %s (fence %s)", self.lease.key, self.lease.fence)
                self.lost.set()
                return
            except StorageError:
                log.exception("lease renewal failed on %s; retrying", self.lease.key)
            except Exception:  # a network blip: the next beat retries before expiry
                log.exception("lease renewal error on %s; retrying", self.lease.key)
            await asyncio.sleep(self.interval)
