"""What a run is doing right now, for a chat surface to show while it happens: a status line,
the answer as the model writes it, tool steps. A preview only: it is never stored (no write
per token) and a failure to show it never touches the run; what the thread must get is
delivered from the committed outbox (see `delivery`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Protocol

from storage import ConversationKey

log = logging.getLogger(__name__)


class Step(StrEnum):
    """Where one tool call stands."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    WAITING = "waiting"  # for a person's approval
    UNKNOWN = "unknown"  # started before a restart; its outcome is unknown


class Progress(Protocol):
    async def queued(self, key: ConversationKey, requester: str | None) -> None:
        """The thread waits for a run slot (`slots`); `begin` follows, here or on
        another replica."""

    async def begin(self, key: ConversationKey, requester: str | None) -> None:
        """A run starts (or resumes) working in this thread."""

    async def text(self, key: ConversationKey, delta: str) -> None:
        """The model wrote more of its answer."""

    async def step(self, key: ConversationKey, call_id: str, tool: str, state: Step) -> None:
        """A tool call moved on."""

    async def end(self, key: ConversationKey) -> None:
        """This thread's work in this process is over (answered, paused, failed, stopped)."""


class Quiet:
    """No surface to show progress on."""

    async def queued(self, key: ConversationKey, requester: str | None) -> None:
        return

    async def begin(self, key: ConversationKey, requester: str | None) -> None:
        return

    async def text(self, key: ConversationKey, delta: str) -> None:
        return

    async def step(self, key: ConversationKey, call_id: str, tool: str, state: Step) -> None:
        return

    async def end(self, key: ConversationKey) -> None:
        return


async def shown(call: Callable[[], Awaitable[None]]) -> None:
    """Run a progress call; its failure is logged and changes nothing else."""
    try:
        await call()
    except Exception:
        log.debug("showing progress failed", exc_info=True)
