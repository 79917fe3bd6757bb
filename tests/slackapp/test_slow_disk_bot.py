"""The real bot (`python -m bot serve`, local storage) on a slow disk: strace delays every
fsync of the process by 30 ms. Its writes leave the event loop (`storage.local.loop_time`),
`/metrics` says so, and every mention is answered; killed there mid-burst and started again
on the same disk, it answers every mention it acknowledged, once."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import aiohttp
import pytest

from bot.standin.slack_api import Message, SlackWebApi
from storage.local import LocalStore
from testkit.child_env import child_bot_env
from testkit.deployment import mention_at
from testkit.health import wait_healthy
from testkit.responses import ScriptedResponses, message, responses_server, user_text
from testkit.runtime import settled
from testkit.services import free_port, wait_until
from testkit.slack import CHANNEL, TEAM, running_api, thread_key
from testkit.slow_disk import on_slow_disk

pytestmark = pytest.mark.slow
FSYNC_DELAY_MS = 30
MENTIONS = 12


async def test_on_a_slow_disk_the_bot_answers_and_says_its_writes_left_the_loop(
    tmp_path: Path,
) -> None:
    script = ScriptedResponses([[message(f"answer {n}")] for n in range(MENTIONS)])
    api = SlackWebApi(team=TEAM)
    with responses_server(script) as model_url:
        async with running_api(api) as api_url, aiohttp.ClientSession() as http:
            port = free_port()
            env = child_bot_env(
                {"BOT_STORAGE": "local", "BOT_DATA_DIR": str(tmp_path / "data")},
                api_url=api_url,
                model_url=model_url,
                port=port,
            )
            command = on_slow_disk([sys.executable, "-m", "bot", "serve"], FSYNC_DELAY_MS)
            with (tmp_path / "bot.log").open("wb") as log:
                bot = _start(command, env, log)
                try:
                    url = f"http://127.0.0.1:{port}"
                    await wait_healthy(url, bot, tmp_path / "bot.log")
                    for n in range(MENTIONS):
                        question = await mention_at(url, api, "UALICE", f"q{n}", CHANNEL)
                        replies = functools.partial(api.bot_replies, CHANNEL, question.ts)
                        [reply] = await api.wait_for(replies, within=30)
                        assert reply.text == f"answer {n}"
                    async with http.get(f"{url}/metrics") as response:
                        scraped = await response.text()
                finally:
                    os.killpg(bot.pid, signal.SIGTERM)
                    await asyncio.to_thread(bot.wait, 30)
    assert "bot_storage_calls_off_loop 1.0" in scraped
    assert "storage calls hold the event loop" in (tmp_path / "bot.log").read_text()


BURST = 10
WORDS = " ".join(f"word{n}" for n in range(20))


async def test_killed_on_a_slow_disk_mid_burst_it_answers_every_mention_once(
    tmp_path: Path,
) -> None:
    """SIGKILL (the bot and strace at once) once some of a burst's mentions are answered,
    while others stream and one waits for the model, the store's writes on worker threads;
    started again on the same slow disk, the bot answers every mention it acknowledged,
    each once and complete."""
    held = threading.Event()

    def answer(request: dict[str, Any]) -> list[dict[str, Any]]:
        return [message(f"answer to {user_text(request)}: {WORDS}")]

    script = ScriptedResponses([], holds={BURST // 2: held}, delta_delay=0.01, respond=answer)
    api = SlackWebApi(team=TEAM)
    data = tmp_path / "data"
    log_path = tmp_path / "bot.log"
    with responses_server(script) as model_url:
        async with running_api(api) as api_url, aiohttp.ClientSession() as http:
            port = free_port()
            env = child_bot_env(
                {"BOT_STORAGE": "local", "BOT_DATA_DIR": str(data)},
                api_url=api_url,
                model_url=model_url,
                port=port,
                BOT_LEASE_SECONDS="2",
            )
            url = f"http://127.0.0.1:{port}"
            command = on_slow_disk([sys.executable, "-m", "bot", "serve"], FSYNC_DELAY_MS)
            with log_path.open("ab") as log:
                bot = _start(command, env, log)
                try:
                    await wait_healthy(url, bot, log_path)
                    questions = await asyncio.gather(
                        *(mention_at(url, api, "UALICE", f"q{n}", CHANNEL) for n in range(BURST))
                    )  # each acknowledged (200)
                    await asyncio.to_thread(wait_until, lambda: len(script.requests) > BURST // 2)
                    await api.wait_for(
                        lambda: sum(bool(_complete(api, q.ts)) for q in questions) >= 2
                    )
                    await _off_the_loop(http, url)
                    done_before = [q for q in questions if _complete(api, q.ts)]
                finally:
                    os.killpg(bot.pid, signal.SIGKILL)
                    await asyncio.to_thread(bot.wait, 30)
                    held.set()  # the dead process's call: answered to nobody
                # Some answered before the kill (not to be answered again), the held one not.
                assert 2 <= len(done_before) < BURST
                bot = _start(command, env, log)
                try:
                    await wait_healthy(url, bot, log_path)
                    store = LocalStore(data)
                    try:
                        await asyncio.to_thread(wait_until, lambda: _all_done(store, questions), 60)
                    finally:
                        store.close()
                finally:
                    os.killpg(bot.pid, signal.SIGTERM)
                    await asyncio.to_thread(bot.wait, 30)
    for question in questions:
        complete = _complete(api, question.ts)
        assert len(complete) == 1, [
            r.streamed or r.text for r in api.bot_replies(CHANNEL, question.ts)
        ]


async def _off_the_loop(http: aiohttp.ClientSession, url: str, within: float = 30) -> None:
    """Wait until `/metrics` says the store's calls left the loop (a burst's keeps are one
    write, so it takes the runs' writes as well to tell)."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        async with http.get(f"{url}/metrics") as response:
            if "bot_storage_calls_off_loop 1.0" in await response.text():
                return
        assert asyncio.get_running_loop().time() < deadline, "the calls never left the loop"
        await asyncio.sleep(0.1)


def _complete(api: SlackWebApi, thread_ts: str) -> list[Message]:
    """The thread's replies that hold its answer whole."""
    question = api.messages[(CHANNEL, thread_ts)].text.removeprefix(f"<@{api.bot_user}> ")
    whole = f"answer to {question}: {WORDS}"
    return [r for r in api.bot_replies(CHANNEL, thread_ts) if whole in (r.streamed or r.text)]


def _all_done(store: LocalStore, questions: list[Message]) -> bool:
    return all(settled(store, thread_key(question.ts)) for question in questions)


def _start(command: list[str], env: dict[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """In a session of its own: SIGTERM to the group reaches the bot as well as strace."""
    return subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
