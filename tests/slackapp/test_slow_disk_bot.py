"""The real bot (`python -m bot serve`, local storage) on a slow disk: strace delays every
fsync of the process by 30 ms. Its writes leave the event loop (`storage.local.loop_time`),
`/metrics` says so, and every mention is answered."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

import aiohttp
import pytest

from bot.standin import requests
from bot.standin.slack_api import SlackWebApi
from testkit.child_env import child_bot_env
from testkit.health import wait_healthy
from testkit.responses import ScriptedResponses, message, responses_server
from testkit.services import free_port
from testkit.slack import CHANNEL, TEAM, running_api, signed_headers
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
                        question = api.add_user_message(CHANNEL, "UALICE", f"<@UBOT> q{n}")
                        mention = requests.app_mention(
                            user="UALICE", text=question.text, ts=question.ts, channel=CHANNEL
                        )
                        body = requests.event_callback(TEAM, mention, f"EvSlow{n}")
                        headers = {"Content-Type": "application/json", **signed_headers(body)}
                        async with http.post(
                            f"{url}/slack/events", data=body.encode(), headers=headers
                        ) as response:
                            assert response.status == 200
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


def _start(command: list[str], env: dict[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """In a session of its own: SIGTERM to the group reaches the bot as well as strace."""
    return subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
