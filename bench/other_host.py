"""`python -m bench.other_host serve`: the bot, as if it ran on another host.

A lease holder is named by host, boot id, pid and start time; a process on the same host can
prove a dead holder dead and take its threads at once. This process reports another host
name, so it can prove nothing and waits for leases to expire, as a replica on another
machine would. Only the benchmark uses it; the bot itself is unchanged."""

from __future__ import annotations

import socket
import sys

if __name__ == "__main__":
    real = socket.gethostname()
    socket.gethostname = lambda: f"{real}-other"  # before the bot names itself
    from bot.cli import main

    sys.exit(main(sys.argv[1:]))
