"""A slow disk made from outside a process: `command` run under strace, which delays every
fsync and fdatasync of it (and of its threads and children) by `delay_ms`. strace does
not pass SIGTERM on to the program: signal the process group to stop both."""

from __future__ import annotations

import shutil


def on_slow_disk(command: list[str], delay_ms: int) -> list[str]:
    strace = shutil.which("strace")
    assert strace, "strace makes the slow disk: ./dev test installs it"
    delay = f"inject=fsync,fdatasync:delay_enter={delay_ms * 1000}"
    traced = ["-f", "--seccomp-bpf", "-qq", "-o", "/dev/null", "-e", "trace=fsync,fdatasync"]
    return [strace, *traced, "-e", delay, *command]
