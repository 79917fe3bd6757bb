"""Lease owners (`bot.runtime.lease_owner`): who holds a thread, and when another process on
the same host may take it over at once because the holder is provably dead."""

from __future__ import annotations

import os
import socket

from bot.runtime import lease_owner
from bot.runtime.lease_owner import SEPARATOR, new_owner, process_identity, provably_dead

NO_SUCH_PID = 4_194_305  # above Linux's highest possible pid (2**22)


def owner_of(pid: int, ticks: object, host: str | None = None, boot: str | None = None) -> str:
    parts = [host or socket.gethostname(), boot or lease_owner.boot_id(), str(pid), str(ticks)]
    return new_owner(SEPARATOR.join(parts))


def test_this_process_identity() -> None:
    host, boot, pid, ticks = process_identity().split(SEPARATOR)
    assert host == socket.gethostname() and boot == lease_owner.boot_id()
    assert int(pid) == os.getpid() and ticks == str(lease_owner.start_ticks(os.getpid()))


def test_a_new_owner_per_acquisition() -> None:
    first, second = new_owner(), new_owner()
    assert first != second
    assert first.startswith(process_identity() + SEPARATOR)
    suffix = first.rsplit(SEPARATOR, 1)[1]
    assert len(suffix) == 8 and int(suffix, 16) >= 0
    assert new_owner("h|b|1|2").startswith("h|b|1|2|")


def test_this_process_is_alive() -> None:
    assert provably_dead(new_owner()) is False


def test_a_live_process_with_its_own_start_time_is_alive() -> None:
    parent = os.getppid()
    assert provably_dead(owner_of(parent, lease_owner.start_ticks(parent))) is False


def test_a_pid_that_no_longer_runs_is_dead() -> None:
    assert provably_dead(owner_of(NO_SUCH_PID, 12345)) is True


def test_a_reused_pid_is_dead() -> None:
    """The pid runs, but it is another process: its start time differs."""
    me = os.getpid()
    assert provably_dead(owner_of(me, int(lease_owner.start_ticks(me) or 0) + 1)) is True
    parent = os.getppid()
    assert provably_dead(owner_of(parent, int(lease_owner.start_ticks(parent) or 0) + 1)) is True


def test_nothing_can_be_proven_about_another_host_or_boot() -> None:
    assert provably_dead(owner_of(NO_SUCH_PID, 1, host="another-host")) is False
    assert provably_dead(owner_of(NO_SUCH_PID, 1, boot="otherboo")) is False


def test_owners_of_another_shape_are_never_dead() -> None:
    assert provably_dead("worker-a") is False  # e.g. a test's or an admin's owner
    assert provably_dead("a|b|c") is False
    assert provably_dead(owner_of(NO_SUCH_PID, 1).replace(str(NO_SUCH_PID), "pid")) is False
