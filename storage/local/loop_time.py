"""How long the embedded store's quick calls hold the event loop, and whether the next may be
made on it (`LocalStore.run_here`). A commit waits for the disk (`synchronous=FULL`, an
fsync): a call holds the loop about 0.5 ms on this machine, fsync included, and tens of
milliseconds on a slow or networked disk, stalling every request and stream of the process
meanwhile. So the store counts how many of the last writes made on the loop held it longer
than `LIMIT`: while most did, its calls go to a worker thread (which costs CPU, not the
loop's time), and one write every `PROBE_EVERY` seconds is made on the loop again, to see
whether the disk has become quick. Reads are not counted: on a slow disk they stay quick,
and one taken for a probe brought the calls back to the loop every few seconds."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# Seconds a write may hold the loop: ten times a hand-off's CPU cost (about 0.5 ms) and this
# machine's writes in a burst of 500 (0.5 ms p50, 1.5 ms p99), above what a loaded
# machine's scheduler adds to them (with both cores busy, one in five took over 2 ms and one
# in a hundred over 5.6 ms), below a slow disk's fsync.
LIMIT = 0.005
# The writes judged: most of them must be slow. A few slow ones (a checkpoint, a garbage
# collection, the scheduler) are not.
WINDOW = 15
PROBE_EVERY = 5.0  # seconds between writes made on the loop while the disk is slow
WARN_EVERY = 3600.0  # seconds between warnings in the log (the changes in between: info)


@dataclass
class LoopTime:
    limit: float = LIMIT
    probe_every: float = PROBE_EVERY
    clock: Callable[[], float] = time.monotonic
    slow: bool = False
    recent: deque[bool] = field(default_factory=lambda: deque(maxlen=WINDOW))  # over the limit
    next_probe: float = 0.0
    probing: bool = False
    warned_at: float | None = None

    def allows(self) -> bool:
        """Whether the next quick call may be made on the loop: yes while they are quick;
        while they are slow, one every `probe_every` seconds (and the reads after it, until
        a write, which is the probe, has been made)."""
        if not self.slow or self.probing:
            return True
        now = self.clock()
        if now < self.next_probe:
            return False
        self.next_probe, self.probing = now + self.probe_every, True
        return True

    def took(self, seconds: float) -> None:
        """A write made on the loop held it `seconds` (a read is not told: it waits for no
        fsync). A probe decides alone: one quick write on a disk that was slow brings the
        calls back to the loop."""
        over = seconds > self.limit
        if self.probing:
            self.probing = False
            if not over:
                self.recent.clear()
                self.slow = False
                log.info("storage calls are quick again: made on the event loop")
            return
        self.recent.append(over)
        if not self.slow and sum(self.recent) > WINDOW // 2:
            self.slow = True
            self.next_probe = self.clock() + self.probe_every
            self._tell(seconds)

    def _tell(self, seconds: float) -> None:
        now = self.clock()
        warn = self.warned_at is None or now - self.warned_at >= WARN_EVERY
        if warn:
            self.warned_at = now
        log.log(
            logging.WARNING if warn else logging.INFO,
            "storage calls hold the event loop (the latest %.1f ms; the disk is slow, or the "
            "machine busy): they are made on worker threads until they are quick again",
            seconds * 1000,
        )
