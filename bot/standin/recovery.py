"""Which conversations a restart interrupted, read from the bot's storage: noted before the
kill, shown on the page as "recovering" until the new bot has resumed them (its recovery
sweep) or RECOVERY_WATCH has passed. Without storage settings nothing is noted."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from bot.standin.local_log import LocalLog
from bot.standin.local_workspaces import Places

if TYPE_CHECKING:
    from storage import StorageSettings, Store

log = logging.getLogger(__name__)
RECOVERY_WATCH = 120.0  # seconds the page may say "recovering" after a start


class Recovery:
    def __init__(self, storage: StorageSettings | None, places: Places, log: LocalLog) -> None:
        self.storage = storage
        self.places = places
        self.log = log
        # Conversations a restart interrupted and the new bot should resume: key -> thread_ts
        self.interrupted: dict[str, str] = {}
        self._store: Store | None = None

    async def note_interrupted(self) -> None:
        """Remember the conversations that are running now: a kill interrupts them, and the
        next bot resumes them (its recovery sweep)."""
        try:
            self.interrupted |= await asyncio.to_thread(self._running_conversations)
        except Exception as exc:  # the page only loses a hint
            log.warning("cannot read the conversations' state: %s", exc)

    async def watch(self, current: Callable[[], bool]) -> None:
        """Until the interrupted conversations are resumed, RECOVERY_WATCH has passed, or
        the storage cannot be read; while `current` (no later start took over). Forgets
        them then."""
        deadline = time.monotonic() + RECOVERY_WATCH
        while self.interrupted and current():
            if time.monotonic() > deadline:
                self.log.say(f"{len(self.interrupted)} conversation(s) not resumed yet")
                break
            await asyncio.sleep(0.5)
            try:
                running = await asyncio.to_thread(self._still_running, list(self.interrupted))
            except Exception as exc:
                log.warning("cannot read the conversations' state: %s", exc)
                break
            self.interrupted = {k: ts for k, ts in self.interrupted.items() if k in running}
        if current():
            self.interrupted.clear()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    def _open_store(self) -> Store | None:
        if self._store is None and self.storage is not None:
            from storage import open_store

            self._store = open_store(self.storage)
        return self._store

    def _running_conversations(self) -> dict[str, str]:
        from storage import Status

        store = self._open_store()
        if store is None:
            return {}
        return {
            str(record.key): record.key.thread_ts
            for record in store.list_by_status(Status.RUNNING, limit=100)
            if any(
                record.key.team == p.team
                and (record.key.channel == p.channel or record.key.channel.startswith("D"))
                for p in self.places.all
            )
        }

    def _still_running(self, keys: list[str]) -> set[str]:
        from storage import ConversationKey, Status

        store = self._open_store()
        if store is None:
            return set()
        records = [store.get(ConversationKey.parse(key)) for key in keys]
        return {str(r.key) for r in records if r is not None and r.status is Status.RUNNING}
