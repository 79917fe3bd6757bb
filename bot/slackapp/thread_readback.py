"""Reading a thread back (`conversations.replies` with metadata): what the bot already
posted there, by its marks (see `marks`). The poster uses it to post nothing twice after a
crash, to find approval cards to close, and to tidy streamed replies a dead process left.
Each thread is read with its workspace's token (`clients`)."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slackapp.clients import SlackClients, as_clients
from bot.slackapp.marks import INTERRUPTED, delivers, mark, payload_of
from storage import ConversationKey

log = logging.getLogger(__name__)
LOOKUP_SECONDS = 30  # how long a thread's messages are reused for finding cards
INTERRUPTED_NOTE = (
    ":arrows_counterclockwise: _This reply was interrupted by a restart; it continues below._"
)
Message = dict[str, Any]


class ThreadReadback:
    def __init__(self, client: AsyncWebClient | SlackClients) -> None:
        self.clients = as_clients(client)
        self._seen: dict[ConversationKey, tuple[float, list[Message]]] = {}

    async def messages(
        self, key: ConversationKey, *, fresh: bool, strict: bool = False
    ) -> list[Message]:
        """The thread's messages, oldest first; [] when it cannot be read (the caller then
        posts anyway: at least once beats never). `strict`: Slack's error is raised instead,
        unless the thread is gone (there is nothing in it to find)."""
        if not fresh and self._recent(key):
            return self._seen[key][1]
        found: list[Message] = []
        client = await self.clients.for_key(key)
        try:
            cursor = None
            while True:
                page = await client.conversations_replies(
                    channel=key.channel,
                    ts=key.thread_ts,
                    include_all_metadata=True,
                    limit=200,
                    cursor=cursor,
                )
                found += page.get("messages", [])
                cursor = (page.get("response_metadata") or {}).get("next_cursor")
                if not cursor:
                    break
        except SlackApiError as exc:
            error = exc.response.get("error")
            log.warning("%s: could not read the thread: %s", key, error)
            if strict and error != "thread_not_found":
                raise
            return []
        self._seen[key] = (time.monotonic(), found)
        return found

    def forget(self, key: ConversationKey) -> None:
        """The thread changed (a message deleted): read it afresh next time."""
        self._seen.pop(key, None)

    def _recent(self, key: ConversationKey) -> bool:
        """The thread was read less than `LOOKUP_SECONDS` ago."""
        cached = self._seen.get(key)
        return cached is not None and time.monotonic() - cached[0] < LOOKUP_SECONDS

    async def already_posted(self, key: ConversationKey, outbox_id: str, part: int) -> bool:
        messages = await self.messages(key, fresh=True)
        return any(delivers(message, outbox_id, part) for message in messages)

    async def find_card(self, key: ConversationKey, call_id: str) -> str | None:
        """`channel:ts` of the approval request for `call_id` in the thread, if any."""
        card = await self.card(key, call_id)
        return f"{key.channel}:{card['ts']}" if card else None

    async def card(
        self, key: ConversationKey, call_id: str, *, strict: bool = False
    ) -> Message | None:
        """The approval request for `call_id` in the thread, as last read, if any. A thread
        read a moment ago is looked at first; not found there, it is read again (the card
        may have been posted since). `strict`: see `messages`."""
        for fresh in (False, True) if self._recent(key) else (True,):
            for message in await self.messages(key, fresh=fresh, strict=strict):
                payload = payload_of(message) or {}
                if call_id in str(payload.get("calls", "")).split(","):
                    return message
        return None

    async def open_cards(self, key: ConversationKey) -> list[Message]:
        """The thread's approval requests whose buttons are still there."""
        return [
            message
            for message in await self.messages(key, fresh=True)
            if (payload_of(message) or {}).get("calls")
            and any(block.get("type") == "actions" for block in message.get("blocks") or [])
        ]

    async def tidy_interrupted(self, key: ConversationKey, *, keep: str | None = None) -> int:
        """Streamed replies of a process that died mid-stream (the bot's posts without a
        mark; `keep` is this process's open stream) are closed and replaced by a note, so
        that the answer delivered again is the only one; one that only showed tool steps is
        deleted. Returns how many."""
        bot_id = await self.bot_id(key)
        if bot_id is None:
            return 0
        client = await self.clients.for_key(key)
        tidied = 0
        for message in await self.messages(key, fresh=True):
            ts = str(message.get("ts", ""))
            if message.get("bot_id") != bot_id or payload_of(message) is not None:
                continue
            if ts in (keep, key.thread_ts):
                continue
            try:
                if not str(message.get("text") or "").strip():  # only tool steps: it goes
                    await client.chat_delete(channel=key.channel, ts=ts)
                    tidied += 1
                    continue
                with contextlib.suppress(SlackApiError):  # Slack may have ended it already
                    await client.chat_stopStream(channel=key.channel, ts=ts)
                await client.chat_update(
                    channel=key.channel,
                    ts=ts,
                    text=INTERRUPTED_NOTE,
                    blocks=[],
                    metadata=mark(INTERRUPTED),
                )
                tidied += 1
            except SlackApiError as exc:
                log.warning("%s: could not tidy %s: %s", key, ts, exc.response.get("error"))
        if tidied:
            log.info("%s: replaced %d interrupted streamed replies", key, tidied)
        return tidied

    async def bot_id(self, key: ConversationKey) -> str | None:
        """The bot's id in the conversation's workspace (each workspace has its own)."""
        identity = await self.clients.identity(key)
        return identity.bot_id if identity else None
