"""What local mode does after it has answered: the page is answered at once, as Slack's client
is, and the work (a restart, the bot's output into the log, watching the bot) goes on until
it ends or the stand-in stops."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class Background:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)  # kept until done: the loop holds tasks only weakly
        task.add_done_callback(self._tasks.discard)

    @property
    def idle(self) -> bool:
        """Nothing is going on in the background."""
        return not self._tasks

    async def cancel(self) -> None:
        """Cancel what is still going, and wait until it has ended."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
