"""Admission with real processes: with `BOT_MAX_RUNS=2` and a slow model, a third thread
waits (its status says it is queued; at most two model requests at once), survives a SIGKILL
of the replica while it waits, and is answered once after the restart."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from testkit.deployment import deployment
from testkit.responses import RespondingResponses, message, user_text
from testkit.slack import CHANNEL
from tests.conftest import Backend

pytestmark = pytest.mark.slow


class SlowModel:
    """Answers every request, each only once `go` is set, counting requests at once."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.server = RespondingResponses(self.respond)

    def respond(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            self.go.wait(60)
            time.sleep(0.2)  # still answering while the others start
            return [message(f"Answered: {user_text(request)}")]
        finally:
            with self.lock:
                self.now -= 1


async def test_a_third_thread_waits_queued_survives_a_kill_and_is_answered_once(
    backend: Backend, tmp_path: Path
) -> None:
    model = SlowModel()
    async with deployment(backend, tmp_path, model.server, BOT_MAX_RUNS="2") as bot:
        await bot.start()
        questions = [
            await bot.mention(user, f"question {n}")
            for n, user in enumerate(["UANA", "UBEN", "UCAT"])
        ]

        def queued() -> list[str]:
            return [
                call.args["thread_ts"]
                for call in bot.api.called("assistant.threads.setStatus")
                if "queued" in call.args.get("status", "")
            ]

        [waiting] = await bot.api.wait_for(queued, within=20)
        # The two admitted runs reach the model (slowly on a loaded machine), then a third
        # request, were it sent, would have arrived by the end of the pause.
        await asyncio.to_thread(lambda: wait_until(lambda: model.now == 2))
        await asyncio.sleep(0.5)
        assert (model.now, model.most) == (2, 2)
        assert waiting in {q.ts for q in questions}
        assert len(model.server.requests) == 2
        assert [user_text(r) for r in model.server.requests].count(
            next(q.text.split("> ", 1)[1] for q in questions if q.ts == waiting)
        ) == 0  # the waiting thread never reached the model

        assert await bot.signal(signal.SIGKILL) == -signal.SIGKILL
        model.go.set()  # the dead process's requests end; the next process asks again
        await asyncio.to_thread(lambda: wait_idle(model))
        model.most = 0
        await bot.start()

        def answered() -> bool:
            return all(
                any(r.text.startswith("Answered:") for r in bot.api.bot_replies(CHANNEL, q.ts))
                for q in questions
            )

        await bot.api.wait_for(answered, within=30)
        await asyncio.sleep(0.5)  # anything posted twice would be posted by now
        for question in questions:
            answers = [
                r.text
                for r in bot.api.bot_replies(CHANNEL, question.ts)
                if r.text.startswith("Answered:")
            ]
            assert answers == [f"Answered: {question.text.split('> ', 1)[1]}"]
        assert model.most <= 2


def wait_until(predicate: Callable[[], bool], within: float = 20) -> None:
    deadline = time.monotonic() + within
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)


def wait_idle(model: SlowModel) -> None:
    deadline = time.monotonic() + 10
    while model.now and time.monotonic() < deadline:
        time.sleep(0.05)
