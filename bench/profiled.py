"""`python -m bench.profiled MODULE [ARGS ...]`: run a bot's module (`bot`, `bench.plain_bot`)
under cProfile in every thread, by each thread's own CPU time (`time.thread_time`): the main
thread from the first SIGUSR1, every other thread from its start (Python 3.11 cannot profile
a thread that already exists, and the storage pools' workers start with the first requests).
SIGUSR1 marks the start of a measured stretch, SIGUSR2 its end: what each function spent in
between (its own time, calls) is written as JSON to `BENCH_PROFILE`.N (N = 1, 2, ... for each
SIGUSR2). Only the CPU benchmark uses it; the bot itself is unchanged."""

from __future__ import annotations

import cProfile
import json
import os
import runpy
import signal
import sys
import threading
import time
from typing import Any

Entry = tuple[str, int, str, str]  # file, line, function, the caller's file (built-ins)
_profiles: list[cProfile.Profile] = []
_lock = threading.Lock()
_marked: dict[Entry, tuple[int, float]] = {}
_mark_profiles: list[cProfile.Profile] = []


def _new_profile(*_: Any) -> cProfile.Profile:
    """Profile the calling thread (replacing threading's hook, which called this)."""
    profile = cProfile.Profile(time.thread_time)
    with _lock:
        _profiles.append(profile)
    profile.enable()
    if threading.current_thread() is threading.main_thread():
        _mark_profiles.append(profile)
    return profile


def _totals() -> dict[Entry, tuple[int, float]]:
    """Calls and own CPU seconds per function, over every thread, so far."""
    totals: dict[Entry, tuple[int, float]] = {}
    with _lock:
        profiles = list(_profiles)
    for profile in profiles:
        profile.snapshot_stats()  # reads the counters without disabling the profile
        stats: dict[Any, Any] = profile.stats
        for (file, line, name), (_, calls, own, _cum, callers) in stats.items():
            if file == "~" and callers:  # a built-in: its time goes to each caller's file
                for (caller_file, _, _), figures in callers.items():
                    _add(totals, (file, line, name, caller_file), figures[1], figures[2])
            else:
                _add(totals, (file, line, name, ""), calls, own)
    return totals


def _add(totals: dict[Entry, tuple[int, float]], entry: Entry, calls: int, own: float) -> None:
    before = totals.get(entry, (0, 0.0))
    totals[entry] = (before[0] + calls, before[1] + own)


_main: list[bool] = []


def _mark(*_: Any) -> None:
    global _marked
    if not _main:  # the main thread from the first mark: its start-up imports are not timed
        _main.append(True)
        _new_profile()
    elif os.getenv("BENCH_PROFILE_MAIN"):  # a fresh main-thread profile, callers and all
        with _lock:
            _main_profile().disable()
        _new_profile()
    else:  # hooked again, in case anything unset the thread's profile function meanwhile
        _main_profile().enable()
    _marked = _totals()


_written = 0


def _write(*_: Any) -> None:
    global _written
    _written += 1
    rows = []
    for entry, (calls, own) in _totals().items():
        calls_before, own_before = _marked.get(entry, (0, 0.0))
        if calls - calls_before or own - own_before > 0:
            rows.append([*entry, calls - calls_before, own - own_before])
    path = f"{os.environ['BENCH_PROFILE']}.{_written}"
    with open(f"{path}.part", "w") as out:
        json.dump(rows, out)
    os.replace(f"{path}.part", path)  # whole, for the reader
    if os.getenv("BENCH_PROFILE_MAIN"):
        _main_profile().dump_stats(f"{path}.pstats")


def _main_profile() -> cProfile.Profile:
    """The main thread's latest profile (the last made by a mark)."""
    return _mark_profiles[-1]


if __name__ == "__main__":
    threading.setprofile(_new_profile)
    signal.signal(signal.SIGUSR1, _mark)
    signal.signal(signal.SIGUSR2, _write)
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
