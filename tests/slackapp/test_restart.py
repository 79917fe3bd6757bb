"""The bot process (`python -m bot serve`) killed mid-run and started again: the thread gets
the resume notice and then the answer. Real processes, the real OpenAI model class against a
scripted /v1/responses server, the Web API stand-in, signed requests."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.standin import requests
from bot.standin.slack_api import SlackWebApi
from testkit.child_env import child_bot_env
from testkit.health import wait_healthy
from testkit.prefork import popen
from testkit.responses import ScriptedResponses, message, responses_server, tool_call
from testkit.services import free_port, wait_until
from testkit.slack import CHANNEL, TEAM, running_api, signed_headers

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("interval", ["0", None], ids=["checkpoint-every-turn", "default"])
async def test_killed_mid_run_then_restarted(tmp_path: Path, interval: str | None) -> None:
    """Killed while the second model call of a run is in progress. With a checkpoint after
    every turn the first turn (a harmless tool call) is kept and the restarted process goes
    on from it; by default a harmless turn shares the next checkpoint, so the restarted
    process asks the model again from the message: either way one answer, no loss."""
    release = threading.Event()
    script = ScriptedResponses(
        [
            [tool_call("current_time", {"city": "Lima"}, "call_time")],
            [message("(never delivered: the process dies first)")],
            [message("It is noon in Lima.")],
        ],
        holds={1: release},
    )
    api = SlackWebApi(team=TEAM)
    with responses_server(script) as model_url:
        async with running_api(api) as api_url:
            port = free_port()
            env = child_bot_env(
                {"BOT_STORAGE": "local", "BOT_DATA_DIR": str(tmp_path / "data")},
                api_url=api_url,
                model_url=model_url,
                port=port,
                BOT_LEASE_SECONDS="2",
                BOT_LEASE_SKEW_SECONDS="0",
                **({} if interval is None else {"BOT_CHECKPOINT_INTERVAL": interval}),
            )
            log = (tmp_path / "bot.log").open("wb")
            command = [sys.executable, "-m", "bot", "serve"]
            first = _start(command, env, log)
            try:
                await wait_healthy(f"http://127.0.0.1:{port}", first)
                question = api.add_user_message(
                    CHANNEL, "UALICE", "<@UBOT> what time is it in Lima?"
                )
                mention = requests.app_mention(
                    user="UALICE", text=question.text, ts=question.ts, channel=CHANNEL
                )
                body = requests.event_callback(TEAM, mention, "EvR1")
                async with (
                    aiohttp.ClientSession() as http,
                    http.post(
                        f"http://127.0.0.1:{port}/slack/events",
                        data=body.encode(),
                        headers={"Content-Type": "application/json", **signed_headers(body)},
                    ) as response,
                ):
                    assert response.status == 200
                # The first turn (a tool call) is done; the second model call hangs.
                await asyncio.to_thread(wait_until, lambda: len(script.requests) >= 2)
                first.send_signal(signal.SIGKILL)
                first.wait(10)
            finally:
                first.kill()
                release.set()
            assert api.bot_replies(CHANNEL, question.ts) == []

            second = _start(command, env, log)
            try:
                replies = await api.wait_for(
                    lambda: len(r := api.bot_replies(CHANNEL, question.ts)) >= 2 and r, within=60
                )
            finally:
                second.send_signal(signal.SIGTERM)
                await asyncio.to_thread(second.wait, 20)  # the stand-in answers meanwhile
    assert "resuming where I left off" in replies[0].text
    assert replies[1].text == "It is noon in Lima."
    assert len(api.bot_replies(CHANNEL, question.ts)) == 2
    last_input = script.requests[-1]["input"]
    outputs = [i for i in last_input if i.get("type") == "function_call_output"]
    if interval == "0":  # the model saw the first turn's tool output once: nothing redone
        assert [o["call_id"] for o in outputs] == ["call_time"]
    else:  # asked again from the message, which the first process never consumed
        assert outputs == []
        assert "what time is it in Lima?" in str(last_input)
    assert len(script.requests) == 3
    assert second.returncode == 0


def _start(command: list[str], env: dict[str, str], log: Any) -> subprocess.Popen[bytes]:
    return popen(command, env=env, stdout=log, stderr=log)
