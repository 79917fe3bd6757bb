"""The admin commands shared by `/agent-admin` and `python -m bot admin`: their usage and what
they do, in one table (`USAGE` is the help both show). Kept apart from `bot.admin` so that
the command line can list them without importing the runtime."""

from __future__ import annotations

# Each command: its usage lines and what it does (one line each, for the console's help).
COMMANDS: dict[str, tuple[tuple[str, ...], str]] = {
    "status": (
        ("status [<thread link>]",),
        "counts by status, the oldest paused, feedback; or one conversation's deliveries",
    ),
    "list": (
        ("list [stale] [--older-than 1d]",),
        "conversations awaiting approval, interrupted or set aside",
    ),
    "discard": (
        (
            "discard <thread link | [enterprise:]team:channel:ts>",
            "discard stale --older-than <duration> [--dry-run]",
        ),
        "discard one conversation's saved state, or every stale one",
    ),
    "help": (("help",), "these commands"),
}
USAGE = "\n".join(
    f"`{line}`" + (f"  {summary}" if i == len(lines) - 1 else "")
    for lines, summary in COMMANDS.values()
    for i, line in enumerate(lines)
)
