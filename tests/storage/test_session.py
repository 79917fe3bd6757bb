"""The Agents SDK Session backend: exact round trips, limits, pop, clear, big batches."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from typing import Any, cast

import pytest
from agents import Agent, Runner, function_tool
from agents.items import TResponseInputItem
from agents.memory import Session, SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call

from storage import ConversationSession, Store
from testkit.prefork import popen
from tests.storage.conftest import KEY


def opaque(items: Iterable[dict[str, Any]]) -> list[TResponseInputItem]:
    """Items of any JSON shape, not only the SDK's: the session keeps them as opaque text."""
    return cast("list[TResponseInputItem]", list(items))


async def read(session: ConversationSession, limit: int | None = None) -> list[dict[str, Any]]:
    """The session's items as the plain JSON objects these tests wrote."""
    return cast("list[dict[str, Any]]", await session.get_items(limit))


async def pop(session: ConversationSession) -> dict[str, Any] | None:
    return cast("dict[str, Any] | None", await session.pop_item())


def digest(items: list[Any]) -> list[str]:
    """What the SDK compares when it reconciles a pending session write."""
    return [json.dumps(item, sort_keys=True) for item in items]


async def real_sdk_items() -> list[Any]:
    """Items produced by a real run: a message, a function_call, and a function_call_output
    with unicode, nulls and more than 400 KB of text."""

    @function_tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return json.dumps({"city": city, "note": None, "blob": "ünïcødé ✓ 🚀 " * 30_000})

    model = ScriptedModel(
        [
            [function_call("lookup", {"city": "Zürich"}, call_id="call-1")],
            [assistant_message("Done — «Zürich» ✓")],
        ]
    )
    agent = Agent(name="assistant", model=model, tools=[lookup])
    result = await Runner.run(agent, "Tell me about Zürich 🇨🇭")
    items = result.to_input_list()
    assert len(json.dumps(items)) > 400_000
    return items


async def test_session_satisfies_the_sdk_protocol(store: Store) -> None:
    assert isinstance(ConversationSession(store, KEY), Session)


async def test_real_sdk_items_round_trip_exactly(store: Store) -> None:
    items = await real_sdk_items()
    session = ConversationSession(store, KEY)
    await session.add_items(items)
    again = await ConversationSession(store, KEY).get_items()
    assert digest(again) == digest(items)
    assert again == items


async def test_limit_returns_the_latest_in_order(store: Store) -> None:
    session = ConversationSession(store, KEY)
    await session.add_items(opaque({"role": "user", "content": f"m{i}"} for i in range(7)))
    latest = await read(session, limit=3)
    assert [item["content"] for item in latest] == ["m4", "m5", "m6"]
    assert await session.get_items(limit=0) == []
    assert len(await session.get_items(limit=50)) == 7


async def test_pop_and_clear(store: Store) -> None:
    session = ConversationSession(store, KEY)
    assert await session.pop_item() is None
    await session.add_items(opaque([{"n": 1}, {"n": 2}]))
    assert await pop(session) == {"n": 2}
    assert await read(session) == [{"n": 1}]
    await session.clear_session()
    assert await read(session) == []
    await session.add_items(opaque([{"n": 3}]))
    assert await read(session) == [{"n": 3}]


async def test_a_batch_beyond_one_transaction_is_appended_whole(store: Store) -> None:
    session = ConversationSession(store, KEY)
    await session.add_items(opaque([{"n": 0}]))
    batch = [{"n": i, "pad": "é" * 50_000} for i in range(1, 131)]  # 130 items, ~13 MB
    await session.add_items(opaque(batch))
    await session.add_items(opaque([{"n": 131}]))
    items = await read(session)
    assert [item["n"] for item in items] == list(range(132))
    assert digest(items[1:131]) == digest(batch)
    assert [item["n"] for item in await read(session, limit=5)] == list(range(127, 132))
    assert await pop(session) == {"n": 131}
    assert await pop(session) == batch[-1]  # n = 130
    assert [item["n"] for item in await read(session, limit=2)] == [128, 129]


async def test_staged_items_are_invisible_to_others_until_committed(store: Store) -> None:
    from storage import CheckpointMeta

    lease, _ = store.acquire(KEY, "w")
    staged = ConversationSession(store, KEY, lease=lease, staged=True)
    await staged.add_items(opaque([{"n": 1}]))
    assert await read(staged) == [{"n": 1}]
    assert await read(ConversationSession(store, KEY)) == []
    done = store.commit(
        lease,
        state={"s": 1},
        meta=CheckpointMeta(schema_version="1.21", agent_fingerprint="f"),
        expected_version=0,
        items=staged.pending,
        base_seq=staged.base_seq,
    )
    assert done.next_seq == 1
    staged.committed(done.next_seq)
    assert await read(ConversationSession(store, KEY)) == [{"n": 1}]


@pytest.mark.slow
def test_concurrent_appends_from_processes_are_atomic(
    store: Store, child_env: Callable[..., dict[str, str]]
) -> None:
    workers, batches = 4, 15
    procs = [
        popen(
            [
                sys.executable,
                "-m",
                "testkit.procs",
                "append_batches",
                str(KEY),
                f"w{w}",
                str(batches),
            ],
            env=child_env(),
        )
        for w in range(workers)
    ]
    assert [p.wait(120) for p in procs] == [0] * workers
    items = [json.loads(text) for text in store.read_items(KEY).items]
    assert len(items) == workers * batches * 3
    # Every batch is whole and contiguous: no interleaving inside one add_items.
    for start in range(0, len(items), 3):
        chunk = items[start : start + 3]
        assert [i["i"] for i in chunk] == [0, 1, 2]
        assert len({(i["w"], i["b"]) for i in chunk}) == 1
    assert len({(i["w"], i["b"]) for i in items}) == workers * batches


async def test_a_direct_session_reads_what_was_appended_after_its_last_read(store: Store) -> None:
    """Nothing a direct session read earlier hides a later append, its own or another's."""
    session = ConversationSession(store, KEY, session_settings=SessionSettings(limit=10))
    await session.add_items(opaque([{"n": 1}]))
    assert await read(session) == [{"n": 1}]
    await session.add_items(opaque([{"n": 2}]))
    assert await read(session) == [{"n": 1}, {"n": 2}]
    await ConversationSession(store, KEY).add_items(opaque([{"n": 3}]))
    assert await read(session) == [{"n": 1}, {"n": 2}, {"n": 3}]


async def test_each_turn_of_a_run_sees_the_turns_before_it(store: Store) -> None:
    session = ConversationSession(store, KEY, session_settings=SessionSettings(limit=10))
    model = ScriptedModel([[assistant_message("one")], [assistant_message("two")]])
    agent = Agent(name="assistant", model=model)
    await Runner.run(agent, "first", session=session)
    await Runner.run(agent, "second", session=session)
    seen = [item.get("content") for item in model.calls[-1].input if item.get("role") == "user"]
    assert seen == ["first", "second"]


async def test_all_items_as_the_sdks_compaction_asks_for_them(store: Store) -> None:
    """`OpenAIResponsesCompactionSession` reads everything with a limit of 2**31 - 1."""
    await ConversationSession(store, KEY).add_items(opaque({"n": i} for i in range(3)))
    everything = await read(ConversationSession(store, KEY), limit=2_147_483_647)
    assert everything == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert store.read_items(KEY, -1).items == []


async def test_items_that_are_not_json_are_gaps_in_the_history(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A damaged row is left out (and logged), never an error; a limit counts the items that
    can be read, as the SDK's SQLiteSession does."""
    session = ConversationSession(store, KEY)
    await session.add_items(opaque([{"n": 1}, {"n": 2}]))
    store.append_items(KEY, ["not json {{{"])
    await session.add_items(opaque([{"n": 3}]))
    store.append_items(KEY, ['{"cut": "short'])
    assert await read(session) == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert await read(session, limit=2) == [{"n": 2}, {"n": 3}]
    assert "not JSON" in caplog.text


async def test_a_pop_drops_unreadable_items_on_top_and_returns_a_readable_one(
    store: Store,
) -> None:
    session = ConversationSession(store, KEY)
    await session.add_items(opaque([{"n": 1}, {"n": 2}]))
    store.append_items(KEY, ["not json {{{", "nor this"])
    assert await pop(session) == {"n": 2}
    assert await read(session) == [{"n": 1}]
    store.append_items(KEY, ["not json {{{"])
    assert await pop(session) == {"n": 1}
    store.append_items(KEY, ["not json {{{"])
    assert await pop(session) is None
    assert await read(session) == []


async def test_unreadable_items_inside_a_batch_too(store: Store) -> None:
    """A batch beyond one transaction (one blob on aws) with damaged items among its own."""
    session = ConversationSession(store, KEY)
    batch = [json.dumps({"n": i}) for i in range(100)]
    batch[50] = batch[99] = "not json {{{"
    store.append_items(KEY, batch)
    readable = [{"n": i} for i in range(99) if i != 50]
    assert await read(session) == readable
    assert await read(session, limit=2) == readable[-2:]
    assert await pop(session) == {"n": 98}
    assert await read(session, limit=1) == [{"n": 97}]
    for _ in range(97 - 51 + 1):
        await pop(session)
    assert await pop(session) == {"n": 49}
    assert await read(session) == readable[:49]
