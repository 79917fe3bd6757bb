"""The real bot behind local mode, as a child process (`python -m bot serve`, the production
bolt app): what it is told (`ChildBot`), starting it until it answers its health check,
stopping it, and "Restart bot", which really kills it (a crash, not a polite exit) and
starts a new one. Its state is what the page says of the bot; the outbox delivers while it
is `UP`."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bot.model_choice import KEY, OFFLINE, missing_key_text
from bot.settings import RuntimeSettings
from bot.standin.background import Background
from bot.standin.errors import LOOPBACK
from bot.standin.local_log import LocalLog
from bot.standin.local_workspaces import USERS, Places
from bot.standin.recovery import Recovery

UP = ("running", "recovering")  # the bot answers; deliveries go out
START_LIMIT = 60  # seconds a start may take to answer its health check
DEMO_AGENT = str(RuntimeSettings.model_fields["agent"].default)  # without BOT_AGENT


def _ids(value: str) -> list[str]:
    return [part for part in value.replace(",", " ").split() if part]


@dataclass(frozen=True)
class ChildBot:
    """What the child bot is told: the Web API and the signing secret to trust (this
    process's), its port, its data, and who may administer it."""

    token: str
    secret: str
    page_port: int  # where the stand-in's Web API is
    port: int
    data_dir: Path
    places: Places
    demo: bool

    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": self.token,
            "SLACK_SIGNING_SECRET": self.secret,
            "SLACK_API_URL": f"http://{LOOPBACK}:{self.page_port}/api/",
            "PORT": str(self.port),
            "HOST": LOOPBACK,
            "BOT_DATA_DIR": str(self.data_dir),
            # alice may use /agent-admin and approve anyone's tool call, unless told otherwise
            "BOT_ADMINS": os.getenv("BOT_ADMINS", USERS["alice"]),
            "BOT_APPROVERS": os.getenv("BOT_APPROVERS", USERS["alice"]),
            "BOT_LEASE_SECONDS": os.getenv("BOT_LEASE_SECONDS", "3"),
        }
        env.pop("SLACK_APP_TOKEN", None)
        if self.places.oauth:  # installed through the OAuth flow: no one token
            env.pop("SLACK_BOT_TOKEN")
            env |= self.places.bot_env()
        if self.demo:
            env["BOT_DEMO_MODEL"] = "1"
        return env

    def model(self, key_missing: list[str]) -> str:
        """What the page's badge says the agent runs on."""
        if self.env().get("BOT_MODEL") == OFFLINE:
            return f"offline model (BOT_MODEL={OFFLINE})"
        if key_missing:
            return f"OpenAI model: no {KEY}"
        return "offline demo model" if self.demo else "OpenAI model"

    def agent(self) -> str:
        """The agent the bot child runs (`BOT_AGENT` passes through to it), for the page."""
        return self.env().get("BOT_AGENT") or DEMO_AGENT

    def roles(self) -> dict[str, list[str]]:
        env = self.env()
        names = {uid: name for name, uid in USERS.items()}
        return {
            role: [names.get(uid, uid) for uid in _ids(env[variable])]
            for role, variable in (("admins", "BOT_ADMINS"), ("approvers", "BOT_APPROVERS"))
        }


@dataclass(frozen=True)
class Restarted:
    killed: int | None  # the old bot's pid
    pid: int
    took: float  # seconds until the new one answered


class BotSupervisor:
    def __init__(
        self,
        child: ChildBot,
        recovery: Recovery,
        log: LocalLog,
        background: Background,
        *,
        on_state: Callable[[], None],
    ) -> None:
        self.child = child
        self.recovery = recovery
        self.log = log
        self.background = background
        self.on_state = on_state  # the outbox looks again: the bot may be up, or down
        self.bot: asyncio.subprocess.Process | None = None
        self.state = "starting"
        self.http: aiohttp.ClientSession | None = None  # the stand-in's, while it serves
        self.stopping = False  # the stand-in is stopping: the bot's exit is no news
        self._restarting = False
        self._generation = 0  # one per start: a later start makes an earlier one moot
        self._healthy_at: dict[int, float] = {}
        # The agents the bot says run on OpenAI's model while no key is set (its /healthz).
        self.key_missing: list[str] = []

    @property
    def model_warning(self) -> str | None:
        """What the person must be told at start: the agent needs a key and none is set."""
        return missing_key_text(self.key_missing) if self.key_missing else None

    @property
    def up(self) -> bool:
        return self.state in UP

    def set_state(self, state: str) -> None:
        """What the page says of the bot; the outbox is told."""
        self.state = state
        self.on_state()

    async def start(self) -> float | None:
        """Start the bot and wait until it answers its health check; the seconds it took,
        or None when it did not come up (the state says why)."""
        self._generation += 1
        generation = self._generation
        self.set_state("starting")
        started = time.monotonic()
        await self.recovery.note_interrupted()
        bot = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "serve",
            env=self.child.env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=1 << 20,
        )
        self.bot = bot
        for stream in (bot.stdout, bot.stderr):
            assert stream is not None
            self.background.start(self.log.pump(stream, generation, self._healthy_at))
        answered = await self._healthy(bot, started)
        if generation != self._generation:
            return None  # a restart took over
        if not answered:
            self._say_not_up(bot)
            return None
        self._healthy_at[generation] = time.monotonic()
        self.background.start(self._watch(bot))
        if self.recovery.interrupted:
            self.set_state("recovering")
            self.background.start(self._watch_recovery(generation))
        else:
            self.set_state("running")
        return time.monotonic() - started

    async def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.bot and self.bot.returncode is None:
            self.bot.send_signal(sig)
            await self.bot.wait()

    async def restart(self) -> Restarted | None:
        """Kill the bot and start a new one; None when a restart is already under way or
        the new one did not come up."""
        if self._restarting:
            return None
        self._restarting = True
        try:
            self.set_state("restarting")
            old = self.bot.pid if self.bot else None
            await self.recovery.note_interrupted()  # before the kill: what it was running
            await self.stop(signal.SIGKILL)  # a crash, not a polite exit: nothing is lost
            took = await self.start()
            if took is None or self.bot is None:
                return None
            return Restarted(old, self.bot.pid, took)
        finally:
            self._restarting = False

    async def _healthy(self, bot: asyncio.subprocess.Process, started: float) -> bool:
        """Whether the bot answered its health check before it exited or START_LIMIT."""
        assert self.http is not None
        while bot.returncode is None and time.monotonic() - started < START_LIMIT:
            try:
                async with self.http.get(f"http://{LOOPBACK}:{self.child.port}/healthz") as r:
                    if r.status == 200:
                        health = await r.json()
                        self.key_missing = list(health.get("openai_key_missing") or [])
                        return True
            except (aiohttp.ClientError, ValueError):
                pass
            await asyncio.sleep(0.1)
        return False

    def _say_not_up(self, bot: asyncio.subprocess.Process) -> None:
        if bot.returncode is None:
            self.set_state("not answering")
            self.log.say(
                f"the bot (pid {bot.pid}) did not answer its health check in {START_LIMIT} s",
                terminal=True,
            )
        else:
            self.set_state(f"exited ({bot.returncode})")
            code = bot.returncode
            self.log.say(f"the bot exited with code {code} while starting", terminal=True)

    async def _watch(self, bot: asyncio.subprocess.Process) -> None:
        code = await bot.wait()
        if bot is self.bot and not (self._restarting or self.stopping):
            self.set_state(f"exited ({code})")
            self.log.say(f"the bot exited with code {code}; Restart bot restarts it", terminal=True)

    async def _watch_recovery(self, generation: int) -> None:
        def current() -> bool:
            return generation == self._generation

        await self.recovery.watch(current)
        if current() and self.state == "recovering":
            self.set_state("running")
