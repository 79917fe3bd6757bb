"""A replica on another host dies mid-run: a replica of this host takes its thread over
through the heartbeat (the dead one stopped beating), long before its lease would lapse,
and the thread is answered once. On another host nothing proves the holder dead, so only
the heartbeat can have told."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from storage import Status
from testkit.deployment import deployment
from testkit.responses import RespondingResponses, message
from testkit.services import wait_until
from testkit.slack import CHANNEL, thread_key
from tests.conftest import Backend

pytestmark = pytest.mark.slow


async def test_a_dead_replicas_thread_is_taken_over_through_its_heartbeat(
    backend: Backend, tmp_path: Path
) -> None:
    first = threading.Event()  # the dead replica's request: held until it is dead

    def respond(request: dict[str, Any]) -> list[dict[str, Any]]:
        if not first.is_set():
            first.set()
            threading.Event().wait(5)  # the replica is killed meanwhile
        return [message("Here is your answer.")]

    model = RespondingResponses(respond)
    # A lease far longer than the test: only the heartbeat can end it in time.
    async with deployment(backend, tmp_path, model, BOT_LEASE_SECONDS="120") as bot:
        other, here = await asyncio.gather(
            bot.start_replica(tmp_path / "other.log", other_host=True),
            bot.start_replica(tmp_path / "here.log"),
        )
        question = await other.mention(bot.api, "UANA", "what time is it?")
        await asyncio.to_thread(first.wait, 20)
        key = thread_key(question.ts, CHANNEL)
        held = bot.store.get(key)
        assert held is not None and held.lease_owner is not None
        assert "-other|" in held.lease_owner
        other.process.send_signal(signal.SIGKILL)
        await asyncio.to_thread(other.process.wait, 10)

        def answered() -> list[str]:
            return [
                r.text
                for r in bot.api.bot_replies(CHANNEL, question.ts)
                if r.text == "Here is your answer."
            ]

        await bot.api.wait_for(answered, within=30)
        taken = bot.store.get(key)
        assert taken is not None and taken.fence > held.fence
        assert held.lease_expires_at is not None and held.lease_expires_at > bot.store.clock()
        log = here.log.read_text()
        assert "stopped beating" in log and "(its replica stopped beating)" in log

        def idle() -> bool:
            record = bot.store.get(key)
            return record is not None and record.status is Status.IDLE

        await asyncio.to_thread(wait_until, idle, 20)
        assert answered() == ["Here is your answer."]
