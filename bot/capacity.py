"""How many runs a replica serves at once by default (`BOT_MAX_RUNS`), from its cores and
memory."""

from __future__ import annotations

import os
from pathlib import Path

RUNS_PER_CORE = 32  # a run mostly waits on the model: about 10 ms of CPU per model turn
MEMORY_PER_RUN = 8 * 1024 * 1024  # bytes one run may hold at worst (a window of history,
# its RunState, shared files resolved into its model request)


def default_max_runs() -> int:
    """`RUNS_PER_CORE` runs per core, at least 4, and no more than half the memory holds at
    `MEMORY_PER_RUN` each (the process needs the rest)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    runs = max(4, RUNS_PER_CORE * (cores or 1))
    memory = _memory_bytes()
    if memory:
        runs = min(runs, max(4, memory // 2 // MEMORY_PER_RUN))
    return runs


def _memory_bytes() -> int | None:
    """The container's memory limit (cgroup v2), else the machine's."""
    try:
        text = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if text.isdigit():
            return int(text)
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None
