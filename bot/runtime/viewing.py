"""What a person is looking at in the chat surface while they talk to the agent (the channel
or item beside the agent's container), as the surface reports it: kept with their message
(in the inbox, then the session), and told to the model with it, so that "summarise this"
means something. A hint for the model, never a permission: the agent reads nothing because
of it, and tools that act on a channel decide for themselves."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, Field

VIEWED_ITEMS = 5  # items kept of one report (the surface orders them by relevance)
FRESH = timedelta(hours=12)  # an older report says little of what they look at now
Kind = Literal["channel", "thread", "message", "canvas", "list", "other"]


class ViewedItem(BaseModel):
    kind: Kind
    id: str = Field(max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    channel: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9]+$")
    label: str | None = Field(default=None, max_length=80, pattern=r"^[a-z0-9_/#.-]+$")


class Viewing(BaseModel):
    """One report: what they view (most relevant first) as of `at`. `thread_ts` limits it to
    one conversation of the container (the older assistant experience reports per thread);
    None: whichever they write in next."""

    items: list[ViewedItem] = Field(default_factory=list, max_length=VIEWED_ITEMS)
    at: datetime
    thread_ts: str | None = Field(default=None, pattern=r"^[0-9]+(\.[0-9]+)?$")

    def applies_to(self, thread_ts: str, now: datetime) -> bool:
        return bool(self.items) and now - self.at <= FRESH and self.thread_ts in (None, thread_ts)


def describe(viewing: Viewing) -> str:
    """The model's note, e.g. `[Viewing in Slack as they wrote: channel <#C123>]`."""
    parts = [_item(item) for item in viewing.items]
    return f"[Viewing in Slack as they wrote: {'; '.join(parts)}]"


def _item(item: ViewedItem) -> str:
    if item.kind == "channel":
        return f"channel <#{item.id}>"
    if item.kind in ("message", "thread"):
        where = f" in <#{item.channel}>" if item.channel else ""
        return f"a {item.kind} ({item.id}){where}"
    if item.kind == "other":
        return f"{item.label or 'an item'} {item.id}"
    return f"a {item.kind} ({item.id})"
