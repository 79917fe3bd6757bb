"""Local mode: a browser-based Slack stand-in in front of the real bot.

One process serves, on http://127.0.0.1:$PORT, a page that shows a channel and its threads,
the Slack Web API the bot calls (`SlackWebApi`, the same component the tests record with),
and the `response_url` endpoints. The bot itself runs as a child process (`python -m bot
serve`, the production bolt app) and receives properly signed HTTP requests from here:
events for messages and mentions, form-encoded slash commands, `block_actions` payloads.
"Restart bot" really kills the child and starts a new one."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import secrets
import signal
import sys
import uuid
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bot.standin.requests import (
    FORM,
    block_actions,
    event_callback,
    signed_headers,
    slash_command,
)
from bot.standin.slack_api import Message, SlackWebApi

log = logging.getLogger(__name__)
CHANNEL = "C0GENERAL"
USERS = {"alice": "U0ALICE", "bob": "U0BOB"}
MENTION = "@agent"


class Workspace:
    def __init__(self, data_dir: Path, port: int, bot_port: int, *, demo: bool) -> None:
        self.api = SlackWebApi()
        self.data_dir = data_dir
        self.port = port
        self.bot_port = bot_port
        self.demo = demo
        self.secret = secrets.token_hex(16)
        self.bot: asyncio.subprocess.Process | None = None
        self.bot_state = "starting"
        self.response_owner: dict[str, str] = {}  # response_url token -> user
        self.state_file = data_dir / "standin.json"
        self.http: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.api.listeners.append(lambda call: self.save())

    # -- persistence: the channel survives Ctrl-C, like the bot's own state -------------

    def load(self) -> None:
        if self.state_file.exists():
            for raw in json.loads(self.state_file.read_text()):
                message = Message(**{**raw, "reactions": set(raw.get("reactions", []))})
                self.api.messages[(message.channel, message.ts)] = message

    def save(self) -> None:
        rows = [
            {**dataclasses.asdict(m), "reactions": sorted(m.reactions)}
            for m in self.api.messages.values()
        ]
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(rows))
        tmp.replace(self.state_file)

    # -- the bot child process ----------------------------------------------------------

    def bot_env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": "xoxb-local-standin",
            "SLACK_SIGNING_SECRET": self.secret,
            "SLACK_API_URL": f"http://127.0.0.1:{self.port}/api/",
            "PORT": str(self.bot_port),
            "HOST": "127.0.0.1",
            "BOT_DATA_DIR": str(self.data_dir),
            "BOT_ADMINS": os.getenv("BOT_ADMINS", USERS["alice"]),
            "BOT_LEASE_SECONDS": os.getenv("BOT_LEASE_SECONDS", "3"),
        }
        env.pop("SLACK_APP_TOKEN", None)
        if self.demo:
            env["BOT_DEMO_MODEL"] = "1"
        return env

    async def start_bot(self) -> None:
        self.bot_state = "starting"
        self.bot = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "serve", env=self.bot_env()
        )
        assert self.http is not None
        for _ in range(600):
            try:
                async with self.http.get(f"http://127.0.0.1:{self.bot_port}/healthz") as r:
                    if r.status == 200:
                        self.bot_state = "running"
                        return
            except aiohttp.ClientError:
                pass
            if self.bot.returncode is not None:
                self.bot_state = f"exited ({self.bot.returncode})"
                return
            await asyncio.sleep(0.1)

    async def stop_bot(self, sig: int = signal.SIGTERM) -> None:
        if self.bot and self.bot.returncode is None:
            self.bot.send_signal(sig)
            await self.bot.wait()

    async def restart_bot(self) -> None:
        self.bot_state = "restarting"
        await self.stop_bot(signal.SIGKILL)  # a crash, not a polite exit: nothing is lost
        await self.start_bot()

    # -- delivering to the bot like Slack does ------------------------------------------

    async def deliver(self, body: str, content_type: str) -> None:
        """POST to the bot with Slack's signature; retried (X-Slack-Retry-Num) while the
        bot is down or restarting, as Slack retries unacknowledged deliveries."""
        assert self.http is not None
        for attempt in range(60):
            headers = {"Content-Type": content_type, **signed_headers(body, self.secret)}
            if attempt:
                headers |= {"X-Slack-Retry-Num": str(attempt), "X-Slack-Retry-Reason": "timeout"}
            try:
                async with self.http.post(
                    f"http://127.0.0.1:{self.bot_port}/slack/events",
                    data=body.encode(),
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=3),
                ) as response:
                    if response.status < 500:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.5)
        log.error("the bot never acknowledged a delivery")

    async def post_message(self, user: str, text: str, thread_ts: str | None) -> Message:
        mentioned = MENTION in text
        text = text.replace(MENTION, f"<@{self.api.bot_user}>")
        message = self.api.add_user_message(CHANNEL, user, text, thread_ts)
        self.save()
        event: dict[str, Any] = {
            "user": user,
            "text": text,
            "ts": message.ts,
            "channel": CHANNEL,
            "event_ts": message.ts,
            "team": self.api.team,
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        if mentioned:
            await self.deliver(
                event_callback(self.api.team, {**event, "type": "app_mention"}), "application/json"
            )
        if thread_ts or not mentioned:
            body = event_callback(
                self.api.team, {**event, "type": "message", "channel_type": "channel"}
            )
            await self.deliver(body, "application/json")
        return message

    def response_url(self, user: str) -> str:
        token = uuid.uuid4().hex[:12]
        self.response_owner[token] = user
        return f"http://127.0.0.1:{self.port}/respond/{token}"

    async def click(self, user: str, channel: str, ts: str, action_id: str, value: str) -> None:
        message = self.api.messages.get((channel, ts)) or Message(channel, ts, "", user)
        body = block_actions(
            team=self.api.team,
            user=user,
            channel=channel,
            message={"ts": ts, "text": message.text, "blocks": message.blocks or []},
            action_id=action_id,
            value=value,
            response_url=self.response_url(user),
        )
        await self.deliver(body, FORM)

    async def command(self, user: str, command: str, text: str) -> None:
        body = slash_command(
            team=self.api.team,
            channel=CHANNEL,
            user=user,
            command=command,
            text=text,
            response_url=self.response_url(user),
        )
        await self.deliver(body, FORM)

    def background(self, work: Any) -> None:
        """Answer the page at once, as Slack's client does, and deliver in the background."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the page's JSON API ------------------------------------------------------------

    def state(self, user: str) -> dict[str, Any]:
        def view(m: Message) -> dict[str, Any]:
            return {
                "ts": m.ts,
                "user": m.user,
                "text": m.text,
                "blocks": m.blocks,
                "reactions": sorted(m.reactions),
                "bot": m.user == self.api.bot_user,
            }

        messages = sorted(self.api.messages.values(), key=lambda m: float(m.ts))
        top = [
            m for m in messages if m.channel == CHANNEL and not m.thread_ts and not m.ephemeral_to
        ]
        threads = [
            {
                **view(m),
                "replies": [
                    view(r)
                    for r in messages
                    if r.thread_ts == m.ts and r.ts != m.ts and not r.ephemeral_to
                ],
            }
            for m in top
        ]
        private = [
            {"text": r.get("text", ""), "blocks": r.get("blocks")}
            for r in self.api.responses
            if self.response_owner.get(r.get("_token", "")) == user
        ]
        return {
            "demo": self.demo,
            "bot": self.bot_state,
            "channel": "general",
            "threads": threads,
            "private": private[-5:],
            "users": USERS,
        }

    def routes(self) -> list[web.RouteDef]:
        page = resources.files("bot.standin").joinpath("page.html").read_text()

        async def index(request: web.Request) -> web.Response:
            return web.Response(text=page, content_type="text/html")

        async def get_state(request: web.Request) -> web.Response:
            return web.json_response(self.state(request.query.get("user", USERS["alice"])))

        async def post(request: web.Request) -> web.Response:
            data = await request.json()
            user, text = data["user"], str(data.get("text", "")).strip()
            if not text:
                return web.json_response({"ok": False, "error": "empty"}, status=400)
            if text.startswith("/"):
                command, _, rest = text.partition(" ")
                self.background(self.command(user, command, rest))
            else:
                self.background(self.post_message(user, text, data.get("thread_ts")))
            return web.json_response({"ok": True})

        async def click(request: web.Request) -> web.Response:
            data = await request.json()
            self.background(
                self.click(data["user"], CHANNEL, data["ts"], data["action_id"], data["value"])
            )
            return web.json_response({"ok": True})

        async def restart(request: web.Request) -> web.Response:
            self.background(self.restart_bot())
            return web.json_response({"ok": True})

        return [
            web.get("/", index),
            web.get("/ui/state", get_state),
            web.post("/ui/post", post),
            web.post("/ui/click", click),
            web.post("/ui/restart", restart),
            *self.api.routes(),
        ]


async def run_workspace(data_dir: Path, port: int, bot_port: int, *, demo: bool) -> None:
    """Serve the stand-in and run the bot behind it until SIGINT/SIGTERM. `data_dir` exists."""
    workspace = Workspace(data_dir, port, bot_port, demo=demo)
    workspace.load()
    app = web.Application()
    app.add_routes(workspace.routes())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, os.getenv("HOST", "127.0.0.1"), port).start()
    workspace.http = aiohttp.ClientSession()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    model = "offline demo model (no OPENAI_API_KEY)" if demo else "OpenAI"
    print(
        f"local mode: open http://127.0.0.1:{port}  (model: {model}; state in {data_dir})",
        flush=True,
    )
    try:
        await workspace.start_bot()
        await stop.wait()
    finally:
        await workspace.stop_bot()
        await workspace.http.close()
        await runner.cleanup()
