"""The bot as a real process (`python -m bot serve`), restartable, in front of the recording
Web API stand-in and a scripted /v1/responses server, with the storage of a test's backend:
for tests that kill, stop and restart it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import aiohttp

from bot.standin import requests
from bot.standin.slack_api import Message, SlackWebApi
from storage import Conversation, Store
from testkit.child_env import child_bot_env
from testkit.health import stop_children, wait_healthy
from testkit.prefork import popen
from testkit.responses import ScriptedResponses, responses_server
from testkit.runtime import record_of, settled
from testkit.services import free_port, wait_until
from testkit.slack import (
    CHANNEL,
    TEAM,
    Harness,
    button_click,
    running_api,
    signed_headers,
    thread_key,
)


class Storage(Protocol):
    """A configured storage backend (tests/conftest.py's `Backend`): `env` configures a
    child process, `open` a store in this one."""

    env: dict[str, str]

    def open(self, **overrides: Any) -> Store: ...


@dataclass
class Deployment:
    """The bot as a process (restartable), with the Slack stand-in in front of it."""

    api: SlackWebApi
    env: dict[str, str]
    port: int
    log: Path
    effects: Path
    store: Store
    api_url: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> float:
        """Start a bot process; returns the moment it reported healthy."""
        process = _start(self.env, self.log)
        self.processes.append(process)
        return await wait_healthy(self.url, process, self.log)

    async def start_replica(self, log: Path, *, other_host: bool = False) -> Replica:
        """Another replica on a port of its own (`other_host`: as if it ran on another
        machine, see `bench.other_host`), sharing the storage and the stand-ins."""
        port = free_port()
        module = "bench.other_host" if other_host else "bot"
        process = _start({**self.env, "PORT": str(port)}, log, module)
        self.processes.append(process)
        replica = Replica(process, f"http://127.0.0.1:{port}", log)
        await wait_healthy(replica.url, process, log)
        return replica

    @property
    def current(self) -> subprocess.Popen[bytes]:
        return self.processes[-1]

    async def signal(self, sig: int) -> int:
        """Send `sig`, and wait for the process to end (serving the stand-in meanwhile)."""
        self.current.send_signal(sig)
        return await asyncio.to_thread(self.current.wait, 60)

    async def post(self, body: str, content_type: str = "application/json") -> int:
        return await post_signed(self.url, body, content_type)

    async def mention(self, user: str, text: str, channel: str = CHANNEL) -> Message:
        return await mention_at(self.url, self.api, user, text, channel)

    async def click_approve(self, card: Message, user: str) -> int:
        body = button_click(
            TEAM,
            card,
            "approval_approve",
            user,
            response_url=f"http://127.0.0.1:1/respond/{card.ts}",
        )
        return await self.post(body, requests.FORM)

    def people(self) -> Harness:
        """The workspace's people, speaking to this process (the runtime is in the process,
        out of reach: `Harness.runtime` is unset)."""
        return Harness(self.api, self.api_url, self.url, cast(Any, None), self.store)

    def transfers(self) -> list[dict[str, Any]]:
        if not self.effects.exists():
            return []
        return [json.loads(line) for line in self.effects.read_text().splitlines()]

    async def stop_all(self) -> None:
        await stop_children(self.processes)


@dataclass
class Replica:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    async def post(self, body: str, content_type: str = "application/json") -> int:
        return await post_signed(self.url, body, content_type)

    async def mention(self, api: SlackWebApi, user: str, text: str) -> Message:
        return await mention_at(self.url, api, user, text, CHANNEL)


async def post_signed(url: str, body: str, content_type: str = "application/json") -> int:
    """Deliver `body` to a bot at `url` as Slack does (signed); the HTTP status."""
    headers = {"Content-Type": content_type, **signed_headers(body)}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{url}/slack/events", data=body.encode(), headers=headers) as answer,
    ):
        return answer.status


async def mention_at(url: str, api: SlackWebApi, user: str, text: str, channel: str) -> Message:
    """`user` mentions the bot in `channel` (a new thread); the question as Slack holds it."""
    question = api.add_user_message(channel, user, f"<@{api.bot_user}> {text}")
    event = requests.app_mention(user=user, text=question.text, ts=question.ts, channel=channel)
    assert await post_signed(url, requests.event_callback(TEAM, event)) == 200
    return question


def _start(env: dict[str, str], log: Path, module: str = "bot") -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return popen([sys.executable, "-m", module, "serve"], env=env, stdout=out, stderr=out)


@asynccontextmanager
async def deployment(
    backend: Storage, tmp_path: Path, script: ScriptedResponses, **env: str
) -> AsyncIterator[Deployment]:
    api = SlackWebApi(team=TEAM)
    with responses_server(script) as model_url:
        async with running_api(api) as api_url:
            port = free_port()
            settings = child_bot_env(
                backend.env,
                api_url=api_url,
                model_url=model_url,
                port=port,
                **{
                    "BOT_AGENT": "testkit.survival_agent:build_agent",
                    "EFFECTS_FILE": str(tmp_path / "effects.jsonl"),
                    **env,  # the caller's agent, if it names one
                },
            )
            bot = Deployment(
                api,
                settings,
                port,
                tmp_path / "bot.log",
                tmp_path / "effects.jsonl",
                backend.open(),
                api_url,
            )
            try:
                yield bot
            finally:
                await bot.stop_all()


def record(bot: Deployment, question: Message) -> Conversation:
    return record_of(bot.store, thread_key(question.ts, question.channel))


async def finished(bot: Deployment, question: Message) -> None:
    """Wait until the bot is done with the question's thread: released idle, with nothing
    left to deliver (outcomes are posted before the release that records them), so that
    no process or recovery sweep has anything more to post there."""

    key = thread_key(question.ts, question.channel)
    await asyncio.to_thread(wait_until, lambda: settled(bot.store, key), 30)
