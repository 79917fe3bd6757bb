"""Replicas' heartbeats, with two runtimes on one store standing for two replicas: a storage
stall that no replica could beat through does not make live replicas take each other's
threads over."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from agents.testing import ModelStep, ScriptedModel, assistant_message

from bot.runtime import Answer, ConversationRuntime
from bot.runtime.heartbeat import keep_beating
from testkit.runtime import KEY, SideEffects, build_agent, echo_model
from testkit.storage_faults import failing_writes
from tests.conftest import Backend

STALL = 5.0  # seconds: past `recovery.SILENCE`


async def test_a_storage_stall_does_not_make_live_replicas_take_each_others_threads(
    backend: Backend, effects: SideEffects, caplog: pytest.LogCaptureFixture
) -> None:
    """A holds a thread while storage stalls longer than a replica may stay silent. B's
    beat waits out the stall and lands first: A's last beat is then older than the silence
    allowed, but so is B's own previous one, and B leaves A's thread alone (chaos seed
    140008: every replica took the others' threads over after a 3.4 s sqlite lock, each
    thread moving twice, and one answer was posted twice)."""
    if backend.name != "local":
        pytest.skip("the stall is sqlite's write lock held by another connection")
    caplog.set_level(logging.INFO)
    store_a, store_b = backend.open(lease_seconds=30), backend.open(lease_seconds=30)
    asked = asyncio.Event()

    async def respond(call: Any) -> Any:
        asked.set()
        await asyncio.sleep(STALL + 3)  # the model works through the stall
        return [assistant_message("Done after the stall.")]

    a = ConversationRuntime(
        store_a, build_agent(ScriptedModel([ModelStep.respond(respond)]), effects), owner="A"
    )
    b = ConversationRuntime(store_b, build_agent(echo_model(), effects), owner="B")
    beating = [asyncio.create_task(keep_beating(rt)) for rt in (a, b)]
    try:
        await asyncio.sleep(1.5)  # both have beaten
        running = asyncio.create_task(
            a.handle_message(KEY, event_id="E1", user="U1", text="take your time")
        )
        await asyncio.wait_for(asked.wait(), 10)
        # A's writes fail at once while the lock is held; B's wait for it (sqlite's busy
        # timeout), so B's beat is the first to land once the stall is over.
        with failing_writes(store_a) as fault:
            fault.start(seconds=STALL)
            await asyncio.sleep(STALL + 0.5)
        outcomes = await asyncio.wait_for(running, 20)
    finally:
        for task in beating:
            task.cancel()
        await asyncio.gather(*beating, return_exceptions=True)
    assert [o.text for o in outcomes if isinstance(o, Answer)] == ["Done after the stall."]
    assert "stopped beating" not in caplog.text and "took over" not in caplog.text
    record = store_b.get(KEY)
    assert record is not None and record.fence == 1
