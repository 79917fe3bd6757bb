"""Keeps first: a Slack request waiting to be acknowledged (its message must be durable
first, within Slack's 3 seconds) goes ahead of new runs. In a burst, a run that started as
soon as its own message was kept would take the CPU and the storage threads that the other
requests are waiting for; so a run waits until no request is in flight (counted from when
the HTTP layer receives it, `keeping`, until it is answered), and never longer than
`patience`: as long as Slack waits for an acknowledgement. Under ordinary load requests
come and go in milliseconds, so a run rarely waits at all; under a burst it waits for the
burst to be acknowledged (500 at once: p99 3.7 s with a 0.1 s patience, 1.5 s with one that
lets the burst finish, `./dev bench burst500`); past `patience` runs go on regardless, so
that sustained overload delays them but never starves them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

PATIENCE = 3.0  # seconds a run may wait for the requests in flight (Slack's ack deadline)


class KeepsFirst:
    def __init__(self, patience: float = PATIENCE) -> None:
        self.patience = patience
        self.in_flight = 0
        self._idle: asyncio.Event | None = None  # one per burst, made in the running loop

    @contextlib.contextmanager
    def keeping(self) -> Iterator[None]:
        if not self.in_flight:
            self._idle = asyncio.Event()
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            if not self.in_flight and self._idle is not None:
                self._idle.set()

    async def settled(self) -> None:
        """Return once no keep is in flight, or after `patience`."""
        if self.in_flight and self._idle is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), self.patience)
