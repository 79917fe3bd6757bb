"""Keeps first: a Slack request waiting to be acknowledged (its message must be durable
first, within Slack's 3 seconds) goes ahead of new runs. In a burst, a run that started as
soon as its own message was kept would take the CPU and the storage threads that the other
requests are waiting for; so a run waits until no request is in flight (counted from when
the HTTP layer receives it, `keeping`, until it is answered) and, after requests that came
on top of one another (a burst still arriving, between two of its requests), for a `lull`;
and never longer than `patience`: as long as Slack waits for an acknowledgement. A lone
request's own run does not wait. Under ordinary load requests
come and go in milliseconds, so a run rarely waits at all; under a burst it waits for the
burst to be acknowledged (500 at once on DynamoDB Local: ack p99 3.7 s when runs waited at
most 0.1 s, 1.5 s now, `./dev bench burst500`); past `patience` runs go on regardless, so
that sustained overload delays them but never starves them."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Iterator
from contextvars import ContextVar

PATIENCE = 3.0  # seconds a run may wait for the requests in flight (Slack's ack deadline)
LULL = 0.1  # seconds without overlapping requests after which a burst is over
_COUNTED: ContextVar[bool] = ContextVar("keeps_first_counted", default=False)


class KeepsFirst:
    def __init__(self, patience: float = PATIENCE, lull: float = LULL) -> None:
        self.patience = patience
        self.lull = lull
        self.in_flight = 0
        self._idle: asyncio.Event | None = None  # one per burst, made in the running loop
        self._crowded_at = -math.inf  # when a request last arrived while another was in flight

    @contextlib.contextmanager
    def keeping(self) -> Iterator[None]:
        """Around one request (the HTTP layer's) or keep (a listener's: in Socket Mode, the
        request); a keep inside a request counted already is not counted again."""
        if _COUNTED.get():
            yield
            return
        if not self.in_flight:
            self._idle = asyncio.Event()
        else:
            self._crowded_at = time.monotonic()
        self.in_flight += 1
        counted = _COUNTED.set(True)
        try:
            yield
        finally:
            _COUNTED.reset(counted)
            self.in_flight -= 1
            if not self.in_flight and self._idle is not None:
                self._idle.set()

    async def settled(self) -> None:
        """Return once no request is in flight, and none has come on top of another for
        `lull` seconds (a burst that is still arriving); or after `patience`."""
        deadline = time.monotonic() + self.patience
        while (left := deadline - time.monotonic()) > 0:
            if self.in_flight and self._idle is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._idle.wait(), left)
                continue
            calm = time.monotonic() - self._crowded_at
            if calm >= self.lull:
                return
            await asyncio.sleep(min(self.lull - calm, left))
