"""Messages a thread could not take because its backlog is full (`BOT_BACKLOG_LIMIT`): each
was acknowledged but not kept, so the thread is told which, in one notice per burst rather
than one per message."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from bot.runtime.envelope import UserMessage
from bot.runtime.outcomes import Notice, NoticeKind, Outcome
from bot.runtime.text import quote
from storage import ConversationKey

GATHER_SECONDS = 1.0  # refusals this close together are told in one notice
QUOTED = 10


class NotTaken:
    def __init__(self, emit: Callable[[Sequence[Outcome]], None]) -> None:
        self.emit = emit
        self._waiting: dict[ConversationKey, list[UserMessage]] = {}
        self._timers: dict[ConversationKey, asyncio.TimerHandle] = {}

    def add(self, key: ConversationKey, message: UserMessage) -> None:
        self._waiting.setdefault(key, []).append(message)
        if key not in self._timers:
            loop = asyncio.get_running_loop()
            self._timers[key] = loop.call_later(GATHER_SECONDS, self._tell, key)

    async def flush(self) -> None:
        """Tell every thread now (a graceful shutdown)."""
        for key in list(self._timers):
            self._timers[key].cancel()
            self._tell(key)

    def _tell(self, key: ConversationKey) -> None:
        self._timers.pop(key, None)
        messages = self._waiting.pop(key, [])
        if messages:
            self.emit([notice(key, messages)])


def notice(key: ConversationKey, messages: list[UserMessage]) -> Notice:
    people = sorted({m.user for m in messages})
    count = len(messages)
    return Notice(
        key=key,
        kind=NoticeKind.NOT_TAKEN,
        text=f"I couldn't take {count} message{'s' if count != 1 else ''} "
        f"(from {', '.join(f'<@{user}>' for user in people)}): too many messages are waiting "
        "for an answer in this thread already. Please send "
        f"{'them' if count != 1 else 'it'} again once I have answered:",
        details=[quote(m.text) for m in messages[:QUOTED]]
        + ([f"… and {count - QUOTED} more"] if count > QUOTED else []),
    )
