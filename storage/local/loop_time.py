"""How long the embedded store's quick calls hold the event loop, and whether the next may be
made on it (`LocalStore.run_here`). A commit waits for the disk (`synchronous=FULL`, an
fsync): about 0.3 ms on this machine's disk, tens of milliseconds on a slow or networked
one. On the loop that wait stalls every request and stream of the process, so the store
keeps the calls' average wall time there: while it is over `LIMIT`, the calls go to a
worker thread (which costs CPU, not the loop's time), and one every `PROBE_EVERY` seconds
is made on the loop again, to see whether the disk has become quick."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

# Seconds a quick call may hold the loop on average: several times a hand-off's CPU cost
# (about 0.5 ms), well above this machine's commits (0.4 ms p50, 1.5 ms p99).
LIMIT = 0.002
WEIGHT = 0.1  # of the latest call in the moving average: one slow checkpoint does not tip it
PROBE_EVERY = 5.0  # seconds between calls made on the loop while the disk is slow


@dataclass
class LoopTime:
    limit: float = LIMIT
    probe_every: float = PROBE_EVERY
    clock: Callable[[], float] = time.monotonic
    average: float = 0.0  # seconds, wall time of the calls made on the loop
    next_probe: float = 0.0
    probing: bool = False

    @property
    def slow(self) -> bool:
        return self.average > self.limit

    def allows(self) -> bool:
        """Whether the next quick call may be made on the loop: yes while they are quick;
        while they are slow, one every `probe_every` seconds."""
        if not self.slow:
            return True
        now = self.clock()
        if now < self.next_probe:
            return False
        self.next_probe, self.probing = now + self.probe_every, True
        return True

    def took(self, seconds: float) -> None:
        """A call made on the loop held it `seconds`. A probe decides alone: one quick call
        on a disk that was slow brings the calls back to the loop (and one slow call after
        it sends them away again)."""
        was_slow = self.slow
        if self.probing:
            self.average, self.probing = seconds, False
        else:
            self.average += WEIGHT * (seconds - self.average)
        if self.slow and not was_slow:
            self.next_probe = self.clock() + self.probe_every
            log.warning(
                "storage writes hold the event loop %.1f ms on average (the disk is slow): "
                "they are made on worker threads until they are quick again",
                self.average * 1000,
            )
        elif was_slow and not self.slow:
            log.info("storage writes are quick again: made on the event loop")
