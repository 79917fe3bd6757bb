"""The latest session items of recently served threads, kept in memory: a thread served
again by this process skips reading its history when the record shows nothing changed
(same generation, floor and next sequence number). Any other writer changes `next_seq`,
so a stale entry is never used. A record with no items (a new thread) needs no read either.

Bounded by threads and by bytes: an entry holds at most the items a run reads (the
session's limit, `BOT_HISTORY_ITEMS`), but those may be tool outputs of megabytes, so the
entries together hold at most `MAX_BYTES` of item text; least recently used threads go
first, and a thread whose latest items alone weigh more than a sixteenth of that is read
again when it is served (its read costs little next to the model's work on that much)."""

from __future__ import annotations

from collections import OrderedDict

from storage import Conversation, ConversationKey
from storage.session import KnownHistory

MAX_THREADS = 256
MAX_BYTES = 64 * 2**20  # item text, all threads together
ENTRY_SHARE = 16  # one thread's entry holds at most this share of it


class HistoryCache:
    def __init__(self, max_threads: int = MAX_THREADS, max_bytes: int = MAX_BYTES) -> None:
        self.max_threads = max_threads
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_bytes // ENTRY_SHARE
        self._entries: OrderedDict[ConversationKey, tuple[int, int, KnownHistory]] = OrderedDict()
        self._sizes: dict[ConversationKey, int] = {}
        self.bytes = 0  # item text the entries hold
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

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
            self._drop(record.key)
        self.misses += 1
        return None

    def put(self, record: Conversation, known: KnownHistory | None) -> None:
        self._drop(record.key)
        if known is None:
            return
        size = sum(map(len, known.items))
        if size > self.max_entry_bytes:
            return
        self._entries[record.key] = (record.generation, record.session_floor, known)
        self._sizes[record.key] = size
        self.bytes += size
        while len(self._entries) > self.max_threads or self.bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: ConversationKey) -> None:
        if self._entries.pop(key, None) is not None:
            self.bytes -= self._sizes.pop(key)
