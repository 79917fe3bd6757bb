"""The bot as real `python -m bot serve` processes, started, signalled and started again on
one storage, in front of the recording Slack stand-in and a scripted `/v1/responses`
server. People speak to it through a `Harness` (signed requests, as Slack sends them); with
`teams`, the bot serves many workspaces, each installed through the OAuth flow."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp

from bot.standin.slack_api import SlackWebApi
from storage import Store
from testkit.child_env import child_bot_env
from testkit.health import stop_children, wait_healthy
from testkit.prefork import popen
from testkit.responses import ScriptedResponses, responses_server
from testkit.runtime import settled
from testkit.slack import CHANNEL, CLIENT_ID, CLIENT_SECRET, TEAM, Harness, running_api

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class ServedBot:
    """One deployment: its environment (edit it between starts), its processes, in order."""

    api: SlackWebApi
    env: dict[str, str]
    log: Path
    store: Store  # the bot's storage, read directly
    people: Harness  # the stand-in's users of the first workspace
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.env['PORT']}"

    @property
    def current(self) -> subprocess.Popen[bytes]:
        return self.processes[-1]

    async def start(self) -> float:
        """Start a bot process and wait until it reports healthy (the moment it did)."""
        with self.log.open("ab") as out:
            process = _serve(self.env, out, out)
        self.processes.append(process)
        return await wait_healthy(self.url, process, self.log)

    async def run_until_exit(self, within: float) -> tuple[int, str, bool]:
        """Start a bot process expected to refuse to start: its exit code, its output, and
        whether it ever answered healthy meanwhile."""
        process = _serve(self.env, subprocess.PIPE, subprocess.STDOUT)
        healthy = False
        deadline = time.monotonic() + within
        async with aiohttp.ClientSession() as http:
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    async with http.get(f"{self.url}/healthz") as response:
                        healthy = healthy or response.status == 200
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
        if process.poll() is None:
            process.kill()
        output, _ = await asyncio.to_thread(process.communicate)
        return process.wait(), output.decode(errors="replace"), healthy

    async def signal(self, sig: int) -> int:
        """Send `sig` and wait for the process to end (the stand-in, on this event loop,
        keeps answering meanwhile)."""
        self.current.send_signal(sig)
        return await asyncio.to_thread(self.current.wait, 60)

    def workspace(self, team: str, *, enterprise: str | None = None) -> Harness:
        return self.people.workspace(team, enterprise=enterprise)

    async def idle(self, people: Harness, thread_ts: str, *, channel: str = CHANNEL) -> None:
        """Wait until the thread is released idle with nothing left to deliver: no process
        or recovery sweep has anything more to post there."""

        for _ in range(600):
            if settled(self.store, people.key(thread_ts, channel)):
                return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{people.key(thread_ts, channel)} never became idle")

    async def stop_all(self) -> None:
        await stop_children(self.processes)


def _serve(env: dict[str, str], stdout: Any, stderr: Any) -> subprocess.Popen[bytes]:
    return popen([sys.executable, "-m", "bot", "serve"], env=env, stdout=stdout, stderr=stderr)


@asynccontextmanager
async def served_bot(
    storage_env: dict[str, str],
    store: Store,
    tmp_path: Path,
    script: ScriptedResponses,
    *,
    agent: str,
    teams: tuple[str, ...] = (),
    **env: str,
) -> AsyncIterator[ServedBot]:
    """A deployment of the agent `agent` (`module:function`), not started yet. Without
    `teams`, one workspace (`TEAM`, a bot token); with them, many: `TEAM` and each of
    `teams` (its channel `channel_of(team)`), each to be installed once the first process
    is healthy (`await bot.workspace(team).install()`)."""
    api = SlackWebApi(team=TEAM)
    with responses_server(script) as model_url:
        async with running_api(api) as api_url:
            settings = child_bot_env(
                storage_env,
                api_url=api_url,
                model_url=model_url,
                bot_token=None,
                BOT_AGENT=agent,
                **env,
            )
            if teams:
                api.teams[TEAM].channels.add(CHANNEL)
                for team in teams:
                    api.add_team(team, f"Team {team}", channels=(f"C{team}",))
                redirect = f"http://127.0.0.1:{settings['PORT']}/slack/oauth_redirect"
                api.configure_oauth(CLIENT_ID, CLIENT_SECRET, redirect)
                settings |= {"SLACK_CLIENT_ID": CLIENT_ID, "SLACK_CLIENT_SECRET": CLIENT_SECRET}
                settings.pop("SLACK_BOT_TOKEN", None)
            else:
                settings["SLACK_BOT_TOKEN"] = "xoxb-test"
            people = Harness(
                api, api_url, f"http://127.0.0.1:{settings['PORT']}", cast(Any, None), store
            )
            bot = ServedBot(api, settings, tmp_path / "bot.log", store, people)
            try:
                yield bot
            finally:
                await bot.stop_all()
                await people.close()


def channel_of(team: str) -> str:
    """The channel `served_bot` gives each of its `teams`."""
    return CHANNEL if team == TEAM else f"C{team}"
