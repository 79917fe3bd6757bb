"""The model's input for the messages that start a run, built in one place so that every
message reads alike wherever it waited (the inbox, or held in a checkpoint while a run
worked): attributed to its author (`attribution`), with its shared files (`attachments`),
and, for a conversation's first run started inside an existing thread, the thread's earlier
messages ahead of it (`thread_context`); with what its author was viewing in the chat
surface as they wrote, when the surface said (`viewing`).

Nothing here is stored by itself: the items become the run's input, which the SDK puts in
the session and the runtime commits with the run's first turn. Until then a crash only
means building them again (downloads store the same bytes under the same digest). Notes
for the thread (context or files not read) go out with that same commit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from agents import TResponseInputItem

from bot.runtime.attribution import attributed
from bot.runtime.context_source import display_names
from bot.runtime.envelope import HeldMessage
from bot.runtime.outcomes import Notice, NoticeKind, Outcome
from bot.runtime.runtime_parts import RuntimeParts
from bot.runtime.thread_context import earlier_context
from bot.runtime.viewing import describe
from storage import ConversationKey


@dataclass
class ModelInput:
    items: list[TResponseInputItem]
    notes: list[Outcome] = field(default_factory=list)  # for the thread, with the run's commit


async def render(
    parts: RuntimeParts, key: ConversationKey, next_seq: int, messages: list[HeldMessage]
) -> ModelInput:
    """The input for `messages`; `next_seq` is the session's (0: nothing in this
    conversation's history yet)."""
    items: list[TResponseInputItem] = []
    notes: list[Outcome] = []
    first = messages[0] if messages else None
    if next_seq == 0 and first is not None and first.ts and first.ts != key.thread_ts:
        context, told = await earlier_context(parts.source, parts.settings, key, first.ts)
        items += context
        notes += told
    names = await display_names(parts.source, key, {m.user for m in messages})
    skipped: list[tuple[str, str]] = []
    for message in messages:
        text = attributed(message.user, names.get(message.user), message.text)
        if message.viewing is not None:
            text = f"{text}\n{describe(message.viewing)}"
        item: dict[str, Any]
        if not message.files:
            item = {"role": "user", "content": text}
        else:
            attached = await parts.files.attach(parts.source, key, message.files)
            skipped += attached.skipped
            text = "\n".join([text, *attached.lines])
            item = {"role": "user", "content": [{"type": "input_text", "text": text}]}
            item["content"] += attached.parts
        items.append(cast(TResponseInputItem, item))
    if skipped:
        notes.append(
            Notice(
                key=key,
                kind=NoticeKind.FILES_NOT_READ,
                text="I couldn't read every file shared here; I'm answering without these:",
                details=[f"{name}: {why}" for name, why in skipped],
            )
        )
    return ModelInput(items, notes)
