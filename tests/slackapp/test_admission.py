"""Admission: with real processes, `BOT_MAX_RUNS=2` and a slow model, a third thread waits
(its status says it is queued; at most two model requests at once), survives a SIGKILL of
the replica while it waits, and is answered once after the restart. Through the bolt app in
process: `/resume` takes its turn like any run (told it is queued, never beside the runs
that hold the slots, nor holding its thread's lease while it waits)."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agents.testing import ModelStep, ScriptedModel, assistant_message

from bot.permalink import permalink
from bot.settings import RuntimeSettings
from storage import Status, Store
from testkit.deployment import deployment
from testkit.responses import RespondingResponses, message, user_text
from testkit.runtime import SideEffects, build_agent, last_user_text
from testkit.slack import CHANNEL, runtime_of, slack_bot
from tests.conftest import Backend


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


@pytest.mark.slow
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


async def test_resume_waits_for_a_slot_like_any_run(
    local_store: Store, effects: SideEffects
) -> None:
    """`BOT_MAX_RUNS=1`: Alice's run was interrupted (the model failed); Bob's run holds the
    only slot when she runs `/resume`. She is told it is queued, her thread waits without
    its lease, and it continues once Bob's run is done: one model call at a time."""
    started = {"flaky": asyncio.Event(), "long": asyncio.Event()}
    bob_go = asyncio.Event()
    failed = False
    now = most = 0

    async def respond(call: Any) -> Any:
        nonlocal failed, now, most
        text = last_user_text(call)
        if text == "flaky question" and not failed:
            failed = True
            raise RuntimeError("model service 500")  # interrupts Alice's run
        now += 1
        most = max(most, now)
        started["flaky" if "flaky" in text else "long"].set()
        try:
            if text == "long question":
                await bob_go.wait()
            return [assistant_message(f"answer to {text}")]
        finally:
            now -= 1

    model = ScriptedModel([ModelStep.respond(respond) for _ in range(4)])
    settings = RuntimeSettings(max_runs=1, model_retries=0)
    make = runtime_of(local_store, build_agent(model, effects), settings)
    async with slack_bot(local_store, make) as bot:
        flaky = await bot.mention("UALICE", "flaky question")
        await bot.settled(flaky.ts, Status.INTERRUPTED)
        long = await bot.mention("UBOB", "long question")
        await started["long"].wait()  # Bob's run holds the only slot

        status, token = await bot.command("/resume", permalink(bot.key(flaky.ts)), "UALICE")
        assert status == 200
        told = asyncio.ensure_future(bot.responses_for(token))
        ran = asyncio.ensure_future(started["flaky"].wait())
        await asyncio.wait([told, ran], return_when=asyncio.FIRST_COMPLETED)
        assert not ran.done() and now == 1  # not beside Bob's run
        [queued] = told.result()
        assert queued["text"].startswith("Queued: I'm busy with other conversations")
        record = bot.record(flaky.ts)
        assert record is not None and record.status is Status.INTERRUPTED
        assert record.lease_owner is None  # it waits without its lease

        bob_go.set()
        await ran  # served in turn, once the slot is free
        replies = await bot.api.wait_for(
            lambda: [
                m.text
                for m in bot.api.bot_replies(CHANNEL, flaky.ts)
                if m.text == "answer to flaky question"
            ]
        )
        assert replies == ["answer to flaky question"]
        [_, resumed] = await bot.responses_for(token, 2)
        assert resumed["text"].startswith("Resumed <")
        assert "answer to long question" in [m.text for m in bot.api.bot_replies(CHANNEL, long.ts)]
        assert most == 1
