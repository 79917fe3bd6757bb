"""The discussion the bot was called into: when a conversation starts on a message inside an
existing thread, the thread's earlier messages are read once and given to the agent, ahead
of that message, as one user item attributed message by message. It goes into the session
with the run's first turn (one atomic commit, like any other input), so it is never read
again: not after a restart, not on the next message.

Bounded (`BOT_THREAD_CONTEXT_MESSAGES`, default 15; `BOT_THREAD_CONTEXT_CHARS`, default
12,000): the thread's first message and the most recent ones before the mention, each cut
at MESSAGE_CHARS. Slack lets apps outside its Marketplace read a thread about once a minute,
15 messages at a time: when the read is refused, fails or takes longer than CONTEXT_SECONDS,
the run goes on without it (or with the part that was read) and the thread is told so, in
the run's first commit (so once)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

from agents import TResponseInputItem

from bot.runtime.attribution import author
from bot.runtime.context_source import (
    ContextSource,
    EarlierMessage,
    ThreadHistory,
    Unavailable,
    display_names,
)
from bot.runtime.outcomes import Notice, NoticeKind
from bot.settings import RuntimeSettings
from storage import ConversationKey

log = logging.getLogger(__name__)
CONTEXT_SECONDS = 5.0  # the user is waiting: a thread that can't be read quickly is skipped
MESSAGE_CHARS = 2_000


async def earlier_context(
    source: ContextSource, settings: RuntimeSettings, key: ConversationKey, before: str
) -> tuple[list[TResponseInputItem], list[Notice]]:
    """The input item holding the thread's messages before `before` (none when there are
    none), and the notes the thread should get."""
    limit = settings.thread_context_messages
    if limit == 0:
        return [], []
    try:
        async with asyncio.timeout(CONTEXT_SECONDS):
            history = await source.earlier_messages(key, before)
    except Unavailable as exc:
        return [], [_not_read(key, exc.reason)]
    except TimeoutError:
        return [], [_not_read(key, "reading it took too long")]
    except Exception:  # a surface's bug must not fail the run
        log.exception("%s: reading the thread's earlier messages failed", key)
        return [], [_not_read(key, "reading it failed")]
    earlier = [m for m in history.messages if _sooner(m.ts, before)]
    kept, left_out = bounded(earlier, key, limit, settings.thread_context_chars)
    notes = [] if history.complete else [_partly_read(key, history)]
    if not kept:
        return [], notes
    people = {m.user for m in kept if not m.by_bot and not m.by_us}
    names = await display_names(source, key, people)
    header = "Earlier messages in this Slack thread, before you were asked (oldest first"
    if left_out or not history.complete:
        header += "; some were left out"
    lines = [header + "):"] + [line(m, names) for m in kept]
    item: dict[str, Any] = {"role": "user", "content": "\n".join(lines)}
    return [cast(TResponseInputItem, item)], notes


def bounded(
    messages: list[EarlierMessage], key: ConversationKey, limit: int, chars: int
) -> tuple[list[EarlierMessage], int]:
    """The thread's first message (when among them) and the most recent others, at most
    `limit` messages and about `chars` characters in all, each cut at MESSAGE_CHARS; oldest
    first. Returns them and how many were left out."""
    clipped = [_clip(m) for m in messages]
    first = [m for m in clipped[:1] if m.ts == key.thread_ts]
    rest = clipped[len(first) :]
    budget = chars - sum(len(m.text) for m in first)
    recent: list[EarlierMessage] = []
    for message in reversed(rest):
        if len(first) + len(recent) >= limit or len(message.text) > budget:
            break
        recent.append(message)
        budget -= len(message.text)
    kept = first[:limit] + list(reversed(recent))
    return kept, len(messages) - len(kept)


def line(message: EarlierMessage, names: dict[str, str | None]) -> str:
    if message.by_us:
        who = author(message.user, "you, earlier")
    elif message.by_bot:
        who = author(message.user, f"{message.name or 'an app'}, an app")
    else:
        who = author(message.user, names.get(message.user))
    text = message.text.replace("\n", "\n  ")
    if message.files:
        text += f" [shared files, not read: {', '.join(message.files)}]"
    return f"{who}: {text}"


def _clip(message: EarlierMessage) -> EarlierMessage:
    if len(message.text) <= MESSAGE_CHARS:
        return message
    return EarlierMessage(
        user=message.user,
        text=message.text[: MESSAGE_CHARS - 1] + "…",
        ts=message.ts,
        name=message.name,
        by_bot=message.by_bot,
        by_us=message.by_us,
        files=message.files,
    )


def _sooner(ts: str, before: str) -> bool:
    try:
        return float(ts) < float(before)
    except ValueError:
        return False


def _not_read(key: ConversationKey, why: str) -> Notice:
    return _unavailable(
        key,
        f"I couldn't read the earlier messages in this thread ({why}), so I'm answering "
        "from the messages sent to me only.",
    )


def _partly_read(key: ConversationKey, history: ThreadHistory) -> Notice:
    return _unavailable(
        key,
        f"I could read only part of the earlier messages in this thread ({history.why}); "
        "I'm answering with what I could read.",
    )


def _unavailable(key: ConversationKey, said: str) -> Notice:
    """The thread's earlier messages were not all read: `said` what the answer is from."""
    return Notice(
        key=key,
        kind=NoticeKind.CONTEXT_UNAVAILABLE,
        text=f"{said} Quote what matters if I seem to miss it.",
    )
