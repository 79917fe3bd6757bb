"""The warm-up a process does before it reports healthy (`bot.runtime.warm_up`)."""

from __future__ import annotations

import gc
import sys
import threading
import types

import pytest

from bot.runtime.queries import PROBE
from bot.runtime.warm_up import complete_models, freeze_heap, open_pools
from storage import Conversation, ConversationKey, Store
from storage.calls import URGENT_THREADS, StorageCalls

REPLIES = """
from pydantic import BaseModel

class Reply(BaseModel):
    parts: "list[Part]"

class Part(BaseModel):
    text: str
"""


def test_models_left_to_build_on_first_use_are_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As in the OpenAI SDK's response types: a model that refers to one defined after it
    is left unbuilt by pydantic until its first use."""
    module = types.ModuleType("replies_for_the_warm_up_test")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(REPLIES, vars(module))
    assert not module.Reply.__pydantic_complete__

    assert complete_models(module) == 1
    assert module.Reply.__pydantic_complete__
    assert module.Reply(parts=[{"text": "hi"}]).parts[0].text == "hi"
    assert complete_models(module) == 0  # nothing left to build


async def test_every_keep_thread_has_read_storage_before_serving(store: Store) -> None:
    calls = StorageCalls(store)
    readers: set[str] = set()
    get = store.get

    def recording_get(key: ConversationKey) -> Conversation | None:
        readers.add(threading.current_thread().name)
        assert key == PROBE
        return get(PROBE)

    store.get = recording_get  # type: ignore[method-assign]
    try:
        await open_pools(calls)
    finally:
        calls.close()
    assert len(readers) == URGENT_THREADS
    assert all(name.startswith("storage-ack") for name in readers)


def test_what_lives_at_start_is_left_out_of_later_collections() -> None:
    survivor: list[object] = [[]]  # a container the collector tracks
    assert any(o is survivor for o in gc.get_objects())
    try:
        frozen = freeze_heap()
        assert frozen > 0  # (objects freed since by their last reference leave the count)
        assert not any(o is survivor for o in gc.get_objects())  # walked by no collection
    finally:
        gc.unfreeze()  # the rest of the test session collects as before
