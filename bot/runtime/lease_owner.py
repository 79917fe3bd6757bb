"""Who holds a lease, in a form that lets another process on the same host prove the holder
dead: host name, boot id, pid and the process's start time (so a reused pid is not taken
for the dead process), plus a random suffix per acquisition.

A process restarted on the same host (or in the same container) takes over its
predecessor's threads at once instead of waiting for their leases to expire. Across hosts
nothing can be proven: there the lease expiry decides (keep `BOT_LEASE_SECONDS` short)."""

from __future__ import annotations

import os
import socket
import uuid
from functools import cache
from pathlib import Path

SEPARATOR = "|"


@cache
def process_identity() -> str:
    return SEPARATOR.join(
        [socket.gethostname(), boot_id(), str(os.getpid()), str(start_ticks(os.getpid()))]
    )


def new_owner(process: str | None = None) -> str:
    """An owner string for one acquisition by this process."""
    return f"{process or process_identity()}{SEPARATOR}{uuid.uuid4().hex[:8]}"


def owner_pid(owner: str) -> int | None:
    """The pid an owner string names, or None when it is not one of ours."""
    parts = owner.split(SEPARATOR)
    return int(parts[2]) if len(parts) == 5 and parts[2].isdigit() else None


def provably_dead(owner: str) -> bool:
    """True only when `owner` is a process on this very host (same boot) that no longer
    runs; False when unsure."""
    parts = owner.split(SEPARATOR)
    if len(parts) != 5:
        return False
    host, boot, pid_text, ticks, _ = parts
    if host != socket.gethostname() or boot != boot_id() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return ticks != str(start_ticks(pid))
    current = start_ticks(pid)
    return current is None or str(current) != ticks


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return "noboot"


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None
