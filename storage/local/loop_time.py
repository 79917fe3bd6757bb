"""How long the embedded store's quick calls hold the event loop, and whether the next may be
made on it (`LocalStore.run_here`). A commit waits for the disk (`synchronous=FULL`, an
fsync): a call holds the loop about 0.5 ms on this machine, fsync included, and tens of
milliseconds on a slow or networked disk, stalling every request and stream of the process
meanwhile. So the store counts how many of the last writes made on the loop held it longer
than `LIMIT`: while most did, its calls go to a worker thread (which costs CPU, not the
loop's time), and one write every `PROBE_EVERY` seconds is made on the loop again, to see
whether the disk has become quick. Reads are not counted: on a slow disk they stay quick,
and one taken for a probe brought the calls back to the loop every few seconds.

What is judged is the time a write spent blocked, off the CPU and not waiting for one
(`BlockedClock`), not its wall time: on a busy machine the scheduler stretches every write,
and a worker thread would not make that shorter (on two loaded cores half the writes of a
quick disk once took over 5 ms, and sent the calls off the loop for nothing)."""

from __future__ import annotations

import logging
import os
import threading
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


SCHEDSTAT = "/proc/thread-self/schedstat"  # ns on a CPU, ns waiting for one, timeslices


class BlockedClock:
    """Seconds the calling thread spent blocked (on the disk, for a write): wall time less
    the time it ran and the time it waited in the run queue, from Linux's per-thread
    scheduler statistics. Where they cannot be read, wall time."""

    def __init__(self, path: str = SCHEDSTAT) -> None:
        self.path = path
        self._local = threading.local()  # each thread reads its own file (opened once)

    def now(self) -> float:
        """A reading to give `blocked_since`."""
        return time.perf_counter() - self._scheduled()

    def blocked_since(self, reading: float) -> float:
        return max(0.0, self.now() - reading)

    def _scheduled(self) -> float:
        fd = getattr(self._local, "fd", None)
        if fd is None:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                fd = -1  # not Linux, or no scheduler statistics: wall time alone
            self._local.fd = fd
        if fd < 0:
            return 0.0
        try:
            running, waiting = os.pread(fd, 64, 0).split()[:2]
            return (int(running) + int(waiting)) / 1e9
        except (OSError, ValueError):
            return 0.0


BLOCKED = BlockedClock()


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
        """A write made on the loop was blocked for `seconds` (`BlockedClock`; a read is not
        told: it waits for no fsync). A probe decides alone: one quick write on a disk that
        was slow brings the calls back to the loop."""
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
