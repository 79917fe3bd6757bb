"""Real bot processes for the benchmarks: `python -m bot serve` in HTTP mode with the bench
agent, against the Web API stand-in (served by the benchmark's own event loop) and the
storage it is given, fed signed events over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import aiohttp

from bench.common import answers_healthz
from bot.standin import requests
from bot.standin.slack_api import SlackWebApi
from testkit.child_env import child_bot_env
from testkit.services import free_port
from testkit.slack import CHANNEL, TEAM, running_api, signed_headers

ROOT = Path(__file__).resolve().parent.parent


def bot_env(api_url: str, storage: dict[str, str], **extra: str) -> dict[str, str]:
    return child_bot_env(
        storage,
        api_url=api_url,
        bot_token="xoxb-bench",
        **{"BOT_AGENT": "bench.agents:build_agent", "LOG_LEVEL": "WARNING", **extra},
    )


@dataclass
class Bot:
    env: dict[str, str]
    log_path: Path
    module: str = "bot"  # `bench.other_host` stands in for a process on another host
    argv: tuple[str, ...] = ("serve",)
    cwd: Path = ROOT  # another checkout for a bot of an earlier revision
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    healthy_at: float = 0.0
    _log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._log = self.log_path.open("ab")
        self.started_at = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-m", self.module, *self.argv],
            cwd=self.cwd,
            env={**self.env, "PORT": str(self.port)},
            stdout=self._log,
            stderr=self._log,
        )

    async def wait_healthy(self, within: float = 120) -> float:
        """Poll /healthz every 10 ms; returns seconds from start to the first 200."""
        deadline = time.monotonic() + within
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while time.monotonic() < deadline:
                assert self.process is not None and self.process.poll() is None, (
                    f"the bot exited; see {self.log_path}"
                )
                if await answers_healthz(http, self.url):
                    self.healthy_at = time.perf_counter()
                    return self.healthy_at - self.started_at
                await asyncio.sleep(0.01)
        raise TimeoutError(f"{self.url} not healthy within {within}s")

    def footprint(self) -> tuple[float, int]:
        """Resident memory (MB) and open sockets of the process now."""
        assert self.process is not None
        pid = self.process.pid
        rss = 0.0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
        sockets = 0
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                sockets += os.readlink(fd).startswith("socket:")
            except OSError:
                continue
        return rss, sockets

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    async def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.process.wait, 40)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


class Sender:
    """Signed event deliveries to bot processes, as Slack sends them."""

    def __init__(self, api: SlackWebApi) -> None:
        self.api = api
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=60)
        )

    def _delivery(self, text: str, user: str) -> tuple[str, str, dict[str, str]]:
        """A new message in the stand-in's channel and its signed delivery (ts, body,
        headers)."""
        message = self.api.add_user_message(CHANNEL, user, f"<@UBOT> {text}")
        event = requests.app_mention(
            user=user, text=message.text, ts=message.ts, channel=CHANNEL, team=TEAM
        )
        body = requests.event_callback(TEAM, event)
        return message.ts, body, {"Content-Type": "application/json", **signed_headers(body)}

    async def burst(
        self, bot: Bot, texts: list[str], user: str = "UALICE", users: list[str] | None = None
    ) -> list[float]:
        """All at once, from a process of its own (`bench.fire`); the seconds until each
        delivery was acknowledged. `users`: who sends each (else `user` sends all)."""
        deliveries = [
            self._delivery(text, users[i % len(users)] if users else user)
            for i, text in enumerate(texts)
        ]
        job = {
            "url": f"{bot.url}/slack/events",
            "requests": [{"body": body, "headers": headers} for _, body, headers in deliveries],
        }
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.fire",
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        out, _ = await child.communicate(json.dumps(job).encode())
        answers = json.loads(out)
        if child.returncode or any(status != 200 for status, _ in answers):
            raise RuntimeError(f"a delivery was not acknowledged: {answers}")
        return [seconds for _, seconds in answers]

    async def mention(self, bot: Bot, text: str, user: str = "UALICE") -> tuple[str, float]:
        """Returns the message's ts and the seconds until the delivery was acknowledged."""
        ts, body, headers = self._delivery(text, user)
        start = time.perf_counter()
        async with self.http.post(
            f"{bot.url}/slack/events", data=body.encode(), headers=headers
        ) as response:
            await response.read()
            status = response.status
        elapsed = time.perf_counter() - start
        if status != 200:
            raise RuntimeError(f"event answered {status}")
        return ts, elapsed

    async def close(self) -> None:
        await self.http.close()


@asynccontextmanager
async def slack_standin() -> AsyncIterator[tuple[SlackWebApi, str]]:
    api = SlackWebApi(team=TEAM)
    async with running_api(api) as url:
        yield api, url


ANSWER_PREFIXES = ("echo:", "done:")


@dataclass(frozen=True)
class Answered:
    at: float  # when the call that finished the answer was made
    thread_ts: str | None


def answers(api: SlackWebApi, since: int = 0) -> list[Answered]:
    """The bot's answers (`done:`/`echo:`) among the recorded calls: posted whole
    (`chat.postMessage`), or streamed and finished (`chat.stopStream`)."""
    found = []
    for call in api.calls[since:]:
        if call.method == "chat.postMessage":
            if str(call.args.get("text", "")).startswith(ANSWER_PREFIXES):
                found.append(Answered(call.at, call.args.get("thread_ts")))
        elif call.method == "chat.stopStream":
            message = api.messages.get((str(call.args.get("channel")), str(call.args.get("ts"))))
            said = message and (message.text or message.streamed or "")
            if message is not None and str(said).lstrip().startswith(ANSWER_PREFIXES):
                found.append(Answered(call.at, message.thread_ts))
    return found
