"""What the chat surface can tell the runtime about a conversation beyond the message itself:
the thread's earlier messages, who people are, the files they shared. A protocol the chat
surface implements (the Slack layer: `bot.slackapp.conversation_source`), as with
`progress.Progress`; the runtime never imports Slack.

Every call may be refused or fail (rate limits, missing scopes, a file gone): the runtime
then goes on without what it asked for and says so in plain words, never failing the run and
never waiting long for it (callers bound each call with a timeout)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, Field

from storage import ConversationKey


class SharedFile(BaseModel):
    """A file shared with a message, as the surface describes it (not yet read)."""

    id: str = Field(max_length=64)
    name: str = Field(max_length=255)
    mimetype: str = Field(max_length=127)
    size: int = Field(ge=0)
    url: str = Field(max_length=2048, description="where the surface downloads it from")


@dataclass(frozen=True)
class EarlierMessage:
    """A message written in the thread before the conversation started."""

    user: str
    text: str
    ts: str
    name: str | None = None  # a bot's name, when the surface gives it with the message
    by_bot: bool = False  # an app or a bot wrote it
    by_us: bool = False  # this assistant wrote it (an earlier conversation in the thread)
    files: tuple[str, ...] = ()  # names of files shared with it (they are not read)


@dataclass(frozen=True)
class ThreadHistory:
    """Earlier messages, oldest first. `complete` is False when some could not be read;
    `why` then says why, in plain words."""

    messages: list[EarlierMessage] = field(default_factory=list)
    complete: bool = True
    why: str = ""


class Unavailable(Exception):
    """The surface refused or failed; `reason` says why in plain words (for the thread)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ContextSource(Protocol):
    async def earlier_messages(self, key: ConversationKey, before: str) -> ThreadHistory:
        """Messages of the thread written before `before` (a message ts), oldest first, as
        many as the surface reads in one go. Raises `Unavailable`."""

    async def display_name(self, key: ConversationKey, user: str) -> str | None:
        """How `user` is shown to people, or None when unknown (never raises)."""

    async def download(self, key: ConversationKey, file: SharedFile, limit: int) -> bytes:
        """The file's bytes; `Unavailable` when it cannot be read or is over `limit`."""


class NoSource:
    """No surface to ask: no earlier messages, no names, no files."""

    async def earlier_messages(self, key: ConversationKey, before: str) -> ThreadHistory:
        return ThreadHistory()

    async def display_name(self, key: ConversationKey, user: str) -> str | None:
        return None

    async def download(self, key: ConversationKey, file: SharedFile, limit: int) -> bytes:
        raise Unavailable("files can't be read here")


NAMES_SECONDS = 3.0  # names help the model; they are not worth a long wait


async def display_names(
    source: ContextSource, key: ConversationKey, users: set[str]
) -> dict[str, str | None]:
    """Names of `users` (None for those the source does not know or does not answer for
    within NAMES_SECONDS); the lookups run together (one, the usual case, in this task)."""
    if len(users) == 1:
        [user] = users
        try:
            async with asyncio.timeout(NAMES_SECONDS):
                return {user: await source.display_name(key, user)}
        except Exception:  # too slow (or, against its word, failed): no name
            return {user: None}
    ordered = sorted(users)
    lookups = [asyncio.ensure_future(source.display_name(key, user)) for user in ordered]
    if lookups:
        await asyncio.wait(lookups, timeout=NAMES_SECONDS)
    names: dict[str, str | None] = {}
    for user, lookup in zip(ordered, lookups, strict=True):
        if lookup.done() and not lookup.cancelled() and lookup.exception() is None:
            names[user] = lookup.result()
        else:
            lookup.cancel()
            names[user] = None
    return names
