"""What the runtime keeps of people beside their conversations (`storage.people`): that they
were greeted in the agent's container, what they were last seen viewing there (`viewing`),
their recent conversations. Nothing here serves a thread."""

from __future__ import annotations

import asyncio
import logging

from bot.runtime.viewing import Viewing
from storage import Conversation, ConversationKey, PersonKey, StorageError, Store
from storage.calls import StorageCalls

log = logging.getLogger(__name__)


class People:
    def __init__(self, store: Store, storage_calls: StorageCalls) -> None:
        self.store = store
        self.storage_calls = storage_calls

    async def greet_once(self, person: PersonKey) -> bool:
        """True the first time (the caller greets them now), False after."""
        return await self.storage_calls(self.store.mark_greeted, person)

    async def greeting_failed(self, person: PersonKey) -> None:
        """The greeting could not be shown: the next time they come, they are greeted."""
        await self.storage_calls(self.store.unmark_greeted, person)

    async def note_viewing(self, person: PersonKey, viewing: Viewing) -> None:
        """What they view now, for their next message (an older report changes nothing)."""
        await self.storage_calls(
            self.store.note_viewing, person, viewing.model_dump_json(), viewing.at
        )

    async def viewing_for(self, person: PersonKey, thread_ts: str) -> Viewing | None:
        """What they were last seen viewing, when it is recent and applies to this thread
        of their container; None otherwise (or when it cannot be read: it is only a hint)."""
        try:
            record = await self.storage_calls(self.store.get_person, person)
        except Exception:
            log.warning("%s: what they view could not be read", person, exc_info=True)
            return None
        if record is None or record.viewing is None:
            return None
        try:
            viewing = Viewing.model_validate_json(record.viewing)
        except ValueError:
            return None
        return viewing if viewing.applies_to(thread_ts, self.store.clock()) else None

    async def note_conversation(self, person: PersonKey, key: ConversationKey) -> None:
        """They started (or went back to) this conversation: first of their recent ones.
        Best effort: a failure only leaves their list as it was."""
        try:
            await self.storage_calls(self.store.note_conversation, person, key)
        except StorageError as exc:  # storage down, or the record kept changing under it
            log.warning("%s: their recent conversations were not updated: %s", person, exc)
        except Exception:
            log.warning("%s: their recent conversations were not updated", person, exc_info=True)

    async def recent_conversations(self, person: PersonKey) -> list[Conversation]:
        """Their recent conversations as they stand now, newest first (those that expired
        left out): one read of their record and one of each conversation, together."""
        record = await self.storage_calls(self.store.get_person, person)
        if record is None:
            return []
        found = await asyncio.gather(
            *(self.storage_calls(self.store.get, key) for key in record.recent)
        )
        return [conversation for conversation in found if conversation is not None]
