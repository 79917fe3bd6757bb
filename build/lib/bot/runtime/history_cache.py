"""The latest session items of recently served threads, kept in memory: a thread served
again by this process skips reading its history when the record shows nothing changed
(same generation, floor and next sequence number). Any other writer changes `next_seq`,
so a stale entry is never used. A record with no items (a new thread) needs no read either.
Bounded: least recently used threads go first."""

from __future__ import annotations

from collections import OrderedDict

from storage import Conversation, ConversationKey
from storage.session import KnownHistory

MAX_THREADS = 256


class HistoryCache:
    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        self.max_threads = max_threads
        self._entries: OrderedDict[ConversationKey, tuple[int, int, KnownHistory]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, record: Conversation) -> KnownHistory | None:
        if record.next_seq == record.session_floor:  # no items at all: nothing to read
            return KnownHistory([], record.next_seq, complete=True)
        found = self._entries.get(record.key)
        if found is not None:
            generation, floor, known = found
            if (generation, floor, known.next_seq) == (
                record.generation,
                record.session_floor,
                record.next_seq,
            ):
                self._entries.move_to_end(record.key)
                self.hits += 1
                return known
            del self._entries[record.key]
        self.misses += 1
        return None

    def put(self, record: Conversation, known: KnownHistory | None) -> None:
        if known is None:
            self._entries.pop(record.key, None)
            return
        self._entries[record.key] = (record.generation, record.session_floor, known)
        self._entries.move_to_end(record.key)
        while len(self._entries) > self.max_threads:
            self._entries.popitem(last=False)
