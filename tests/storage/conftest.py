"""What the storage tests share besides tests/conftest.py's `backend` and `store`."""

from __future__ import annotations

from datetime import datetime, timedelta

from storage import ConversationKey, Store
from storage.models import utcnow

# One thread is enough: every test gets a fresh backend (a new directory, table and bucket).
KEY = ConversationKey(team="T1", channel="C1", thread_ts="1700000000.000100")

T1_C1 = dict(team="T1", channel="C1")


class Clock:
    """The store's clock, moved on by hand: every thread gets its own moment of activity."""

    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now

    def tick(self, by: timedelta = timedelta(seconds=1)) -> None:
        self.now += by


def clocked(store: Store) -> Clock:
    clock = Clock()
    store.clock = clock
    return clock


def key(n: int, **place: str) -> ConversationKey:
    """Thread `n` of one channel (or of `place`)."""
    return ConversationKey(**(T1_C1 | place), thread_ts=f"1700000000.{n:06d}")
