"""What a turn costs does not grow with its thread (issue 48): a run reads the items after
the conversation's summary, at most `BOT_HISTORY_ITEMS`, so a replica new to a thread of a
thousand turns reads what it reads in a thread of ten; the history a replica keeps in memory
is bounded by items and by bytes. Counted in storage calls and items read, never in time."""

from __future__ import annotations

import json
import types
from collections import Counter
from typing import Any

from agents.testing import ModelStep, ScriptedModel, assistant_message

from bot.runtime import Answer, ConversationRuntime, HistoryCache
from bot.settings import RuntimeSettings
from storage import Commit, Conversation, ConversationKey, Status, Store, Summary
from storage.local import LocalStore
from storage.models import utcnow
from storage.session import KnownHistory
from testkit.runtime import SideEffects, build_agent, record_of

WORDS = "of tides and of the moon, and of what the tide tables said that week; "
SINCE_SUMMARY = 6  # items after the summary in every thread here


def said(seq: int) -> str:
    role = "user" if seq % 2 == 0 else "assistant"
    content = f"<@U1>: {seq} {WORDS * 6}" if role == "user" else f"{seq} {WORDS * 3}"
    return json.dumps({"role": role, "content": content}, separators=(",", ":"))


def written_thread(store: Store, key: ConversationKey, items: int) -> None:
    """A thread of `items` items (a turn is two), summed up but for its last few, written
    as a long conversation leaves it (in commits of at most 90 rows, DynamoDB's share)."""
    lease, _ = store.acquire(key, "writer", status=Status.RUNNING)
    for start in range(0, items, 90):
        chunk = [said(seq) for seq in range(start, min(start + 90, items))]
        summary = None
        if start + len(chunk) == items:
            summary = Summary(through=items - SINCE_SUMMARY, text="They spoke of tides.")
        store.apply(Commit(key=key, lease=lease, items=chunk, base_seq=start, summary=summary))
    store.release(lease, status=Status.IDLE)


class CountedStore:
    """Some of the store's calls (the outermost, by name) and the items its reads returned."""

    def __init__(self, store: Store) -> None:
        self.calls: Counter[str] = Counter()
        self.items_read = 0
        self.depth = 0
        # Not `get`: a run's looks for a stop come with the seconds it runs, not its turns.
        for name in ("keep", "acquire", "apply", "read_items", "read_summary"):
            self._wrap(store, name)
        self._wrap(store, "load_checkpoint")
        self._wrap(store, "get_tool_call")

    def _wrap(self, store: Store, name: str) -> None:
        original = getattr(store, name)

        def counted(_self: Store, *args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            try:
                found = original(*args, **kwargs)
            finally:
                self.depth -= 1
            if self.depth == 0:
                self.calls[name] += 1
                if name == "read_items":
                    self.items_read += len(found.items)
            return found

        counted.__name__ = name  # still one of the local store's quick calls
        setattr(store, name, types.MethodType(counted, store))


def answering() -> ScriptedModel:
    return ScriptedModel([ModelStep.respond(lambda call: [assistant_message("ok")])] * 4)


async def test_a_replica_new_to_a_thread_reads_what_its_run_is_given(
    store: Store, effects: SideEffects
) -> None:
    """A thread of 10 turns and one of 1,000, each summed up but for its last 6 items: a
    replica new to either makes the same storage calls and reads those 6 items."""
    keys = {
        turns: ConversationKey(team="T9", channel="C9", thread_ts=f"1700000200.{turns:06d}")
        for turns in (10, 1_000)
    }
    for turns, key in keys.items():
        written_thread(store, key, 2 * turns)
    counted = CountedStore(store)
    seen = {}
    for turns, key in keys.items():
        counted.calls.clear()
        counted.items_read = 0
        fresh = ConversationRuntime(store, build_agent(answering(), effects), RuntimeSettings())
        outcomes = await fresh.handle_message(key, event_id="Ev1", user="U1", text="and then?")
        assert outcomes == [Answer(key=key, text="ok")]
        assert record_of(store, key).next_seq == 2 * turns + 2
        seen[turns] = (counted.items_read, dict(counted.calls))
    assert seen[10] == seen[1_000]
    assert seen[1_000][0] == SINCE_SUMMARY and seen[1_000][1]["read_items"] == 1


async def test_the_history_a_replica_keeps_of_a_thread_is_what_a_run_reads(
    local_store: LocalStore, effects: SideEffects
) -> None:
    key = ConversationKey(team="T9", channel="C9", thread_ts="1700000300.000100")
    model = ScriptedModel([ModelStep.respond(lambda call: [assistant_message("ok")])] * 40)
    rt = ConversationRuntime(
        local_store, build_agent(model, effects), RuntimeSettings(history_items=10)
    )
    for turn in range(30):
        await rt.handle_message(key, event_id=f"Ev{turn}", user="U1", text=f"turn {turn}")
        known = rt.parts.history.get(record_of(local_store, key))
        assert known is not None and len(known.items) <= 10, f"turn {turn}"


def test_the_history_kept_in_memory_is_bounded_in_bytes() -> None:
    cache = HistoryCache(max_threads=100, max_bytes=64_000)  # an entry: 4,000 bytes at most
    records = [
        _record(ConversationKey(team="T9", channel="C9", thread_ts=f"1700000400.{n:06d}"))
        for n in range(25)
    ]
    for record in records:
        cache.put(record, KnownHistory(["x" * 900] * 4, 3, complete=True))  # 3,600 bytes
        assert cache.bytes <= 64_000
    assert len(cache) == 17 and cache.bytes == 17 * 3_600  # the least recently used went
    assert cache.get(records[0]) is None and cache.get(records[-1]) is not None
    big = _record(ConversationKey(team="T9", channel="C9", thread_ts="1700000500.000100"))
    cache.put(big, KnownHistory(["x" * 4_500], 3, complete=True))  # over its share
    assert cache.get(big) is None and len(cache) == 17


def _record(key: ConversationKey) -> Conversation:
    now = utcnow()
    return Conversation(
        key=key,
        next_seq=3,
        generation=1,
        created_at=now,
        updated_at=now,
        last_activity_at=now,
        expires_at=now,
    )
