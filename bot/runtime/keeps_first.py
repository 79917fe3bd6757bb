"""Keeps first: the keep that a Slack request waits on (it must be durable before the request
is acknowledged, within Slack's 3 seconds) goes ahead of new runs. In a burst, a run that
started as soon as its own message was kept would take the CPU and the storage threads that
the other messages' keeps are waiting for; so a run waits until no keep is in flight, and
never longer than `patience` (under steady load keeps never pause, and runs must go on)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

PATIENCE = 0.1  # seconds a run may wait for the keeps in flight


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
