"""Acknowledgements first: Slack requests waiting to be acknowledged (each message must be
durable first, within Slack's 3 seconds) go ahead of new runs.

Requests are counted from when the HTTP layer receives one until it is answered (`keeping`;
in Socket Mode, a listener's keep). Under ordinary load they come and go in milliseconds: a
run waits only for those in flight, at most `short_patience`, so that steady traffic never
holds runs back. A burst is different: with `crowd` requests in flight at once, or
arriving within a `lull`, a run that started as soon as its own message was kept would take
the CPU and the storage threads that the rest of the burst is waiting for. So in and after
such a crowd, a run waits until no request is in flight and the crowd has been over for a
`lull` (a burst still arriving has gaps between its requests), for at most `patience`: as
long as Slack waits for an acknowledgement, after which runs go on regardless, so that
sustained overload delays them but never starves them. Both signals are needed: a burst's
requests all arrive in its first milliseconds and then wait for their keeps (hundreds in
flight, no arrivals), while on a fast store they may be kept as they come (many arrivals,
few in flight). (500 mentions at once on DynamoDB Local: ack p99 3.7 s when runs waited at
most 0.1 s; 1.1-1.3 s this way, `./dev bench burst500`.)"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Iterator
from contextvars import ContextVar

PATIENCE = 3.0  # seconds a run may wait after a crowd (Slack's ack deadline)
SHORT_PATIENCE = 0.1  # seconds a run may wait for the requests in flight, otherwise
LULL = 0.1  # seconds without a new request after which a crowd is over
CROWD = 8  # requests in flight at once, or arriving within a lull, that make a burst
_COUNTED: ContextVar[bool] = ContextVar("acks_first_counted", default=False)


class AcksFirst:
    def __init__(
        self,
        patience: float = PATIENCE,
        *,
        short_patience: float = SHORT_PATIENCE,
        lull: float = LULL,
        crowd: int = CROWD,
    ) -> None:
        self.patience = patience
        self.short_patience = short_patience
        self.lull = lull
        self.crowd = crowd
        self.in_flight = 0
        self._crowded_at = -math.inf  # the last request that came in (or after) a crowd
        self._arrivals: deque[float] = deque(maxlen=crowd)  # the latest `crowd` arrivals
        # Set while runs may start: nothing in flight, and no crowd within a lull. Waiters
        # wait on it (one event, and one timer for the end of a lull: a burst's hundreds
        # of waiting runs cost nothing until it is over).
        self._calm = asyncio.Event()
        self._calm.set()
        self._timer: asyncio.TimerHandle | None = None

    @contextlib.contextmanager
    def keeping(self) -> Iterator[None]:
        """Around one request (the HTTP layer's) or keep (a listener's: in Socket Mode, the
        request); a keep inside a request counted already is not counted again."""
        if _COUNTED.get():
            yield
            return
        self.in_flight += 1
        self._calm.clear()
        now = time.monotonic()
        self._arrivals.append(now)
        arriving = len(self._arrivals) == self.crowd and now - self._arrivals[0] < self.lull
        if arriving or self.crowded:
            self._crowded_at = now  # a burst, or more of one still arriving
        counted = _COUNTED.set(True)
        try:
            yield
        finally:
            _COUNTED.reset(counted)
            if self.in_flight >= self.crowd:  # a burst still being kept
                self._crowded_at = time.monotonic()
            self.in_flight -= 1
            if not self.in_flight:
                self._look()

    @property
    def crowded(self) -> bool:
        return self.in_flight >= self.crowd or time.monotonic() - self._crowded_at < self.lull

    def _look(self) -> None:
        """Nothing in flight: calm now, or when the crowd's lull is over."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.in_flight:
            return
        left = self.lull - (time.monotonic() - self._crowded_at)
        if left <= 0:
            self._calm.set()
        else:
            self._timer = asyncio.get_running_loop().call_later(left, self._look)

    async def settled(self) -> None:
        """Return once no request is in flight (at most `short_patience`); after a crowd,
        once none is and none has come for `lull` (at most `patience`)."""
        if self._calm.is_set():
            return
        patience = self.patience if self.crowded else self.short_patience
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(patience):
                await self._calm.wait()
