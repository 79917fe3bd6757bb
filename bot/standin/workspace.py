"""Local mode: a browser-based Slack stand-in in front of the real bot.

One process serves, on http://127.0.0.1:$PORT (loopback only, whatever `HOST` says), a page
that shows a channel and its threads, the Slack Web API the bot calls (`SlackWebApi`, the
same component the tests record with), and the `response_url` endpoints. The bot itself runs
as a child process (`python -m bot serve`, the production bolt app) and receives properly
signed HTTP requests from here: events for messages and mentions, form-encoded slash
commands, `block_actions` payloads. "Restart bot" really kills the child and starts a new one.

The page signs requests as alice or bob, so only the page may ask for that: its endpoints
want JSON with the per-start token embedded in the page (`X-Standin-Token`), the Host
127.0.0.1:$PORT or localhost:$PORT (DNS rebinding), a same-origin `Origin` when there is one,
and a user named in `USERS`. The bot's Web API calls need the bot token this process made up.

What the page sends goes through a durable outbox (`standin.json`, next to the bot's state):
kept while the bot is down or restarting, delivered in order once it answers again.

Longer than the project's other modules: local mode's one event-loop state (the page's
outbox, the child process and its restarts, what the page is shown) lives in `Workspace`;
what has no share in that state is elsewhere (`slack_api`, `local_workspaces`, `ephemeral`,
`view`, `people_files`, `requests`; the agent container's view and endpoints in
`container_view` and `container_routes`; the log in `local_log`, refusals and ports in
`errors`). It is a development tool, not part of the served bot."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import json
import logging
import os
import secrets
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from bot.settings import RuntimeSettings
from bot.standin.container_routes import ContainerRoutes
from bot.standin.container_view import container_state, current_offers, dm_place, with_sessions
from bot.standin.ephemeral import OnlyYou, element
from bot.standin.errors import LOOPBACK, LocalModeError, Refused, check_port_free, port_in_use
from bot.standin.local_log import LocalLog
from bot.standin.local_workspaces import Place, Places
from bot.standin.people_files import UPLOAD_BYTES, uploads
from bot.standin.requests import (
    FORM,
    app_mention,
    block_actions,
    event_callback,
    signed_headers,
    slash_command,
)
from bot.standin.requests import message as message_event
from bot.standin.slack_api import Call, Message, SlackWebApi
from bot.standin.view import CHANNEL, permalink, threads_view, title

__all__ = ["CHANNEL", "USERS", "LocalModeError", "Workspace", "permalink", "run_workspace", "title"]

if TYPE_CHECKING:
    from storage import StorageSettings, Store

log = logging.getLogger(__name__)
USERS = {"alice": "U0ALICE", "bob": "U0BOB"}  # the only people the page may post as
MENTION = "@agent"
TOKEN_HEADER = "X-Standin-Token"
UP = ("running", "recovering")  # the bot answers; deliveries go out
RECOVERY_WATCH = 120.0  # seconds the page may say "recovering" after a start
CLICKS_KEPT = 50  # clicks delivered, with the bot's answer, for the page and tests
WATCH_TICK = 0.25  # seconds: how often a waiting /ui/state looks again without an API call
WATCH_LIMIT = 15.0  # seconds a /ui/state with `seen` waits for something new
SERVER_ERROR_RETRIES = 3  # like Slack: a 5xx answer is retried three times, then dropped
DEMO_AGENT = str(RuntimeSettings.model_fields["agent"].default)  # without BOT_AGENT


def _ids(value: str) -> list[str]:
    return [part for part in value.replace(",", " ").split() if part]


class Workspace:
    def __init__(
        self,
        data_dir: Path,
        port: int,
        bot_port: int,
        *,
        demo: bool,
        storage: StorageSettings | None = None,
        oauth: bool = False,
    ) -> None:
        self.bot_token = f"xoxb-local-{secrets.token_hex(12)}"
        self.api = SlackWebApi(token=self.bot_token)  # with agent sessions: the page shows them
        # One workspace (a bot token), or two installed through the OAuth flow (`oauth`).
        self.places = Places(
            self.api,
            oauth=oauth,
            page_url=f"http://{LOOPBACK}:{port}",
            bot_url=f"http://{LOOPBACK}:{bot_port}",
        )
        self.api.base_url = f"http://{LOOPBACK}:{port}"  # where the bot downloads files
        self.api.people = {uid: name for name, uid in USERS.items()}
        self.data_dir = data_dir
        self.port = port
        self.bot_port = bot_port
        self.demo = demo
        self.storage = storage
        self.secret = secrets.token_hex(16)
        self.page_token = secrets.token_urlsafe(24)
        self.hosts = {f"{LOOPBACK}:{port}", f"localhost:{port}"}
        if port == 80:
            self.hosts |= {LOOPBACK, "localhost"}
        self.origins = {f"http://{host}" for host in self.hosts}
        self.bot: asyncio.subprocess.Process | None = None
        self.bot_state = "starting"
        self.state_file = data_dir / "standin.json"
        self.http: aiohttp.ClientSession | None = None
        # What the page sent and the bot has not acknowledged yet, oldest first.
        self.outbox: list[dict[str, Any]] = []
        self.only_you = OnlyYou(self.api, f"http://{LOOPBACK}:{port}")
        # Clicks the bot answered: {"user", "ts", "action_id", "action_type", "value", "status"}
        self.clicks: list[dict[str, Any]] = []
        # Conversations a restart interrupted and the new bot should resume: key -> thread_ts
        self.recovering: dict[str, str] = {}
        self._wake = asyncio.Event()
        self._restarting = False
        self._stopping = False
        self._generation = 0
        self._healthy_at: dict[int, float] = {}
        self.log = LocalLog(data_dir)  # the terminal names only the page's URL
        self._store: Store | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.api.listeners.append(self._on_call)

    # -- persistence: the channel and the outbox survive Ctrl-C --------------------------

    def load(self) -> None:
        if not self.state_file.exists():
            return
        try:
            saved = json.loads(self.state_file.read_text(encoding="utf-8"))
            if isinstance(saved, list):  # the first format: the messages only
                saved = {"messages": saved}
            for raw in saved.get("messages", []):
                message = Message(**{**raw, "reactions": set(raw.get("reactions", []))})
                self.api.messages[(message.channel, message.ts)] = message
            self.outbox = list(saved.get("outbox", []))
            self.places.load(saved.get("installs") or {})
            self.only_you.responders = dict(saved.get("responders", {}))
        except (ValueError, TypeError, AttributeError) as exc:
            raise LocalModeError(
                f"cannot read {self.state_file} ({exc}); move it aside to start over"
            ) from exc

    def save(self) -> None:
        saved = {
            "messages": [
                {**dataclasses.asdict(m), "reactions": sorted(m.reactions)}
                for m in self.api.messages.values()
                if not m.ephemeral_to
            ],
            "outbox": self.outbox,
            "responders": self.only_you.responders,
            "installs": self.places.dump(),
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(saved, ensure_ascii=False, indent=1), encoding="utf-8")
        tmp.replace(self.state_file)

    # -- the bot child process ----------------------------------------------------------

    def bot_env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": self.bot_token,
            "SLACK_SIGNING_SECRET": self.secret,
            "SLACK_API_URL": f"http://{LOOPBACK}:{self.port}/api/",
            "PORT": str(self.bot_port),
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

    def agent(self) -> str:
        """The agent the bot child runs (`BOT_AGENT` passes through to it), for the page."""
        return self.bot_env().get("BOT_AGENT") or DEMO_AGENT

    def roles(self) -> dict[str, list[str]]:
        env = self.bot_env()
        names = {uid: name for name, uid in USERS.items()}
        return {
            role: [names.get(uid, uid) for uid in _ids(env[variable])]
            for role, variable in (("admins", "BOT_ADMINS"), ("approvers", "BOT_APPROVERS"))
        }

    def _set_state(self, state: str) -> None:
        self.bot_state = state
        self._wake.set()

    async def start_bot(self) -> float | None:
        """Start the bot and wait until it answers its health check; the seconds it took,
        or None when it did not come up (the state says why)."""
        self._generation += 1
        generation = self._generation
        self._set_state("starting")
        started = time.monotonic()
        await self._note_interrupted()
        bot = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "serve",
            env=self.bot_env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=1 << 20,
        )
        self.bot = bot
        for stream in (bot.stdout, bot.stderr):
            assert stream is not None
            self.background(self.log.pump(stream, generation, self._healthy_at))
        assert self.http is not None
        while bot.returncode is None and time.monotonic() - started < 60:
            try:
                async with self.http.get(f"http://{LOOPBACK}:{self.bot_port}/healthz") as r:
                    if r.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        else:
            if generation != self._generation:
                return None  # a restart took over
            if bot.returncode is None:
                self._set_state("not answering")
                self._say(
                    f"the bot (pid {bot.pid}) did not answer its health check in 60 s",
                    terminal=True,
                )
            else:
                self._set_state(f"exited ({bot.returncode})")
                code = bot.returncode
                self._say(f"the bot exited with code {code} while starting", terminal=True)
            return None
        if generation != self._generation:
            return None  # a restart took over
        self._healthy_at[generation] = time.monotonic()
        self.background(self._watch(bot))
        if self.recovering:
            self._set_state("recovering")
            self.background(self._watch_recovery(generation))
        else:
            self._set_state("running")
        return time.monotonic() - started

    async def stop_bot(self, sig: int = signal.SIGTERM) -> None:
        if self.bot and self.bot.returncode is None:
            self.bot.send_signal(sig)
            await self.bot.wait()

    async def restart_bot(self) -> None:
        if self._restarting:
            return
        self._restarting = True
        try:
            self._set_state("restarting")
            old = self.bot.pid if self.bot else None
            await self._note_interrupted()  # before the kill: what it was running
            await self.stop_bot(signal.SIGKILL)  # a crash, not a polite exit: nothing is lost
            took = await self.start_bot()
            if took is None or self.bot is None:
                return
            resuming = len(self.recovering)
            after = (
                f"resuming {resuming} interrupted conversation{'s' * (resuming != 1)}"
                if resuming
                else "nothing was interrupted"
            )
            queued = f"; delivering {len(self.outbox)} queued" if self.outbox else ""
            self._say(
                f"bot restarted: pid {old} killed, pid {self.bot.pid} up in {took:.1f} s; "
                f"{after}{queued}"
            )
        finally:
            self._restarting = False

    async def _watch(self, bot: asyncio.subprocess.Process) -> None:
        code = await bot.wait()
        if bot is self.bot and not (self._restarting or self._stopping):
            self._set_state(f"exited ({code})")
            self._say(f"the bot exited with code {code}; Restart bot restarts it", terminal=True)

    def _say(self, line: str, *, terminal: bool = False) -> None:
        self.log.say(line, terminal=terminal)

    # -- recovery: which threads a restart interrupted ----------------------------------

    def _open_store(self) -> Store | None:
        if self._store is None and self.storage is not None:
            from storage import open_store

            self._store = open_store(self.storage)
        return self._store

    def _running_conversations(self) -> dict[str, str]:
        from storage import Status

        store = self._open_store()
        if store is None:
            return {}
        return {
            str(record.key): record.key.thread_ts
            for record in store.list_by_status(Status.RUNNING, limit=100)
            if any(
                record.key.team == p.team
                and (record.key.channel == p.channel or record.key.channel.startswith("D"))
                for p in self.places.all
            )
        }

    def _still_running(self, keys: list[str]) -> set[str]:
        from storage import ConversationKey, Status

        store = self._open_store()
        if store is None:
            return set()
        records = [store.get(ConversationKey.parse(key)) for key in keys]
        return {str(r.key) for r in records if r is not None and r.status is Status.RUNNING}

    async def _note_interrupted(self) -> None:
        """Remember the conversations that are running now: a kill interrupts them, and the
        next bot resumes them (its recovery sweep)."""
        try:
            self.recovering |= await asyncio.to_thread(self._running_conversations)
        except Exception as exc:  # the page only loses a hint
            log.warning("cannot read the conversations' state: %s", exc)

    async def _watch_recovery(self, generation: int) -> None:
        deadline = time.monotonic() + RECOVERY_WATCH
        while self.recovering and generation == self._generation:
            if time.monotonic() > deadline:
                self._say(f"{len(self.recovering)} conversation(s) not resumed yet")
                break
            await asyncio.sleep(0.5)
            try:
                running = await asyncio.to_thread(self._still_running, list(self.recovering))
            except Exception as exc:
                log.warning("cannot read the conversations' state: %s", exc)
                break
            self.recovering = {k: ts for k, ts in self.recovering.items() if k in running}
        if generation == self._generation:
            self.recovering.clear()
            if self.bot_state == "recovering":
                self._set_state("running")

    # -- the outbox: delivering to the bot like Slack does --------------------------------

    def enqueue(self, item: dict[str, Any]) -> None:
        self.outbox.append({"id": uuid.uuid4().hex, "attempts": 0, **item})
        self.save()
        self._wake.set()

    def _body(self, item: dict[str, Any]) -> tuple[str, str]:
        """Built at delivery time, so the signature's time stamp is fresh."""
        place = self.places.find(item.get("team")) or self.places.all[0]
        team, channel = place.team, str(item.get("channel") or place.channel)
        if item["kind"] == "form":  # a click on a Home view (`container_routes`)
            return str(item["body"]), FORM
        if item["kind"] == "event":
            return event_callback(team, item["event"], item["event_id"]), "application/json"
        if item["kind"] == "command":
            body = slash_command(
                team=team,
                channel=channel,
                user=item["user"],
                command=item["command"],
                text=item["text"],
                response_url=item["response_url"],
            )
            return body, FORM
        ts = item["ts"]
        message = self.api.messages.get((channel, ts)) or Message(channel, ts, "", item["user"])
        shown: dict[str, Any] = {"ts": ts, "text": message.text, "blocks": message.blocks or []}
        if message.thread_ts:
            shown["thread_ts"] = message.thread_ts
        body = block_actions(
            team=team,
            user=item["user"],
            channel=channel,
            message=shown,
            action_id=item["action_id"],
            value=item["value"],
            response_url=item["response_url"],
            block_id=item.get("block_id", "b"),
            action_type=item.get("action_type", "button"),
            thread_ts=item.get("thread_ts"),
            ephemeral=bool(item.get("ephemeral")),
        )
        return body, FORM

    async def _until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            self._wake.clear()
            await self._wake.wait()

    async def deliver_forever(self) -> None:
        """One at a time, in order: POST with Slack's signature while the bot is up; a retry
        says so (X-Slack-Retry-Num). Kept until the bot answers: a kill, a restart or
        Ctrl-C in between loses nothing."""
        while True:
            await self._until(lambda: bool(self.outbox) and self.bot_state in UP)
            item = self.outbox[0]
            try:
                status = await self._post(item)
            except Exception:  # e.g. a hand-edited state file: drop it, keep the rest going
                log.exception("cannot deliver %s; dropped", item.get("kind"))
                status = 400
            if status is not None and (status < 500 or item["attempts"] >= SERVER_ERROR_RETRIES):
                if status >= 400:
                    log.error("the bot answered %s to a %s; dropped", status, item["kind"])
                if item["kind"] == "click":
                    self._clicked(item, status)
                if self.outbox and self.outbox[0] is item:
                    self.outbox.pop(0)
                self.save()
                continue
            item["attempts"] += 1
            await asyncio.sleep(0.5)

    def _clicked(self, item: dict[str, Any], status: int) -> None:
        """A click the bot answered, and how."""
        fields = ("user", "ts", "action_id", "action_type", "value")
        self.clicks.append({name: item.get(name) for name in fields} | {"status": status})
        del self.clicks[:-CLICKS_KEPT]

    async def _post(self, item: dict[str, Any]) -> int | None:
        assert self.http is not None
        body, content_type = self._body(item)
        headers = {"Content-Type": content_type, **signed_headers(body, self.secret)}
        if item["attempts"]:
            headers |= {
                "X-Slack-Retry-Num": str(item["attempts"]),
                "X-Slack-Retry-Reason": "http_timeout",
            }
        try:
            async with self.http.post(
                f"http://{LOOPBACK}:{self.bot_port}/slack/events",
                data=body.encode(),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=3),
            ) as response:
                return response.status
        except (aiohttp.ClientError, TimeoutError):
            return None

    # -- what the page does ---------------------------------------------------------------

    def post_message(
        self,
        user: str,
        text: str,
        thread_ts: str | None,
        place: Place | None = None,
        files: Sequence[tuple[str, str, bytes]] = (),
    ) -> Message:
        """`files` (name, type, bytes) are shared with the message, as Slack shares them."""
        place = place or self.places.all[0]
        direct = place.channel.startswith("D")  # the person's DM with the app
        mentioned = MENTION in text and not direct  # Slack sends no app_mention in a DM
        text = text.replace(MENTION, f"<@{self.api.bot_user}>")
        shared = [self.api.add_file(name, mimetype, data) for name, mimetype, data in files]
        message = self.api.add_user_message(place.channel, user, text, thread_ts, shared)
        said = {"user": user, "text": text, "ts": message.ts, "channel": place.channel}
        events = []  # as Slack sends them: a mention in a thread is both events
        if mentioned:
            mention = app_mention(**said, thread_ts=thread_ts, team=place.team)
            events.append(mention | ({"files": shared} if shared else {}))
        if thread_ts or not mentioned:
            extra: dict[str, Any] = {"subtype": "file_share", "files": shared} if shared else {}
            kind = "im" if direct else "channel"
            extra |= {"channel_type": kind}
            events.append(message_event(**said, thread_ts=thread_ts, team=place.team, **extra))
        for event in events:
            self.enqueue(
                {
                    "kind": "event",
                    "team": place.team,
                    "user": user,
                    "ts": message.ts,
                    "thread_ts": thread_ts,
                    "event": event,
                    "event_id": f"Ev{uuid.uuid4().hex[:12]}",
                    "channel": place.channel,
                }
            )
        return message

    def command(
        self,
        user: str,
        command: str,
        text: str,
        thread_ts: str | None,
        place: Place | None = None,
    ) -> None:
        """A slash command; its answers show where it was typed (Slack does not tell the
        app the thread, but shows the person the answer there)."""
        place = place or self.places.all[0]
        where = {"channel": place.channel}
        self.enqueue(
            {
                "kind": "command",
                "team": place.team,
                "channel": place.channel,
                "user": user,
                "thread_ts": thread_ts,
                "command": command,
                "text": text,
                "response_url": self.only_you.response_url(user, thread_ts, where),
            }
        )

    def click(
        self,
        user: str,
        ts: str,
        action_id: str,
        value: str,
        thread_ts: str | None,
        label: str,
        *,
        ephemeral: dict[str, Any] | None = None,
        place: Place | None = None,
    ) -> None:
        """A button clicked on message `ts`, or on one of this person's `ephemeral` ones;
        sent as Slack would, naming the clicked element's block and type."""
        place = place or self.places.all[0]
        if ephemeral is not None:
            ts, blocks, origin = (
                ephemeral["ts"],
                ephemeral["blocks"],
                {"ephemeral": ephemeral["id"]},
            )
        else:
            message = self.api.messages.get((place.channel, ts))
            blocks, origin = (message.blocks if message else None), {"ts": ts}
        origin["channel"] = place.channel
        block_id, kind = element(blocks, action_id)
        if kind == "feedback_buttons":
            self.only_you.choose(user, ts, action_id, value)
        self.enqueue(
            {
                "kind": "click",
                "team": place.team,
                "channel": place.channel,
                "user": user,
                "thread_ts": thread_ts,
                "ts": ts,
                "ephemeral": ephemeral is not None,
                "action_id": action_id,
                "action_type": kind,
                "block_id": block_id,
                "value": value,
                "label": label,
                "response_url": self.only_you.response_url(user, thread_ts, origin),
            }
        )

    def _on_call(self, call: Call) -> None:
        self.only_you.on_call(call)
        self.save()

    def background(self, work: Any) -> None:
        """Answer the page at once, as Slack's client does, and work in the background."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the page's JSON API ------------------------------------------------------------

    def state(self, user: str, place: Place | None = None) -> dict[str, Any]:
        """Everything the page shows this person of a workspace (the first unless `place`
        says); `etag` names this version of it."""
        place = place or self.places.all[0]
        up = self.bot_state in UP
        # Shown as waiting when the bot is down, or did not take it at the first try; not
        # while a delivery is merely on its way.
        held = [item for item in self.outbox if not up or item["attempts"]]
        now, chosen, dm = time.time(), self.only_you.chosen.get(user, {}), self.dm(user, place)

        def threads(channel: str) -> list[dict[str, Any]]:
            return threads_view(
                self.api,
                pending={item["ts"] for item in held if item["kind"] == "event"},
                recovering=set(self.recovering.values()),
                chosen=chosen,
                now=now,
                channel=channel,
            )

        def ephemeral(channel: str) -> list[dict[str, Any]]:
            return current_offers(self.api, self.only_you.view(user, channel), channel, now)

        waiting = [
            {
                "id": item["id"],
                "thread_ts": item.get("thread_ts"),
                "channel": item.get("channel") or place.channel,
                "label": (
                    f"{item['command']} {item['text']}".strip()
                    if item["kind"] == "command"
                    else item.get("label") or "a button"
                ),
            }
            for item in held
            if item["kind"] != "event"
            and item["user"] == user
            and item.get("team", self.places.all[0].team) == place.team
        ]
        names = {uid: name for name, uid in USERS.items()} | {self.api.bot_user: "agent"}
        state = {
            "demo": self.demo,
            "agent": self.agent(),
            "bot": self.bot_state,
            "recovering": len(self.recovering),
            "queued": len(self.outbox),
            "channel": place.channel_name,
            "team": place.team,
            "workspaces": self.places.view(),
            "threads": with_sessions(self.api, threads(place.channel), place.channel),
            "ephemeral": ephemeral(place.channel),
            **container_state(self.api, dm, user, threads(dm.channel)),
            "dm_ephemeral": ephemeral(dm.channel),
            "waiting": waiting,
            "clicks": [c for c in self.clicks if c["user"] == user],
            "users": list(USERS),
            "names": names,
            "roles": self.roles(),
        }
        digest = hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()
        return state | {"etag": digest[:20]}

    async def watch(
        self, user: str, seen: str, within: float = WATCH_LIMIT, place: Place | None = None
    ) -> dict[str, Any]:
        """The state once it is no longer the one the page has (`seen`), or after `within`
        seconds: a Web API call wakes it at once (streamed text shows as it comes), other
        changes within WATCH_TICK."""
        deadline = time.monotonic() + within
        changed = self.api.changed
        while True:
            async with changed:
                state = self.state(user, place)
                if state["etag"] != seen or time.monotonic() >= deadline or self._stopping:
                    return state
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(WATCH_TICK):
                        await changed.wait()

    # -- who may ask ----------------------------------------------------------------------

    @web.middleware
    async def guard(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        """Every request names this machine's page in its Host (no DNS rebinding); the
        page's own endpoints also want its token, its origin, and JSON."""
        try:
            if request.host not in self.hosts:
                raise Refused(
                    403, f"wrong Host {request.host!r}; open http://{LOOPBACK}:{self.port}"
                )
            if request.path.startswith("/ui/"):
                origin = request.headers.get("Origin")
                if origin is not None and origin not in self.origins:
                    raise Refused(403, f"cross-origin request from {origin!r}")
                given = request.headers.get(TOKEN_HEADER, "").encode()
                if not hmac.compare_digest(given, self.page_token.encode()):
                    raise Refused(403, "missing or wrong page token; reload the page")
                if request.method == "POST" and request.content_type != "application/json":
                    raise Refused(400, "the page sends application/json")
            response: web.StreamResponse = await handler(request)
            return response
        except Refused as refused:
            log.warning("refused %s %s: %s", request.method, request.path, refused.error)
            return web.json_response({"ok": False, "error": refused.error}, status=refused.status)

    def _user(self, name: object) -> str:
        if not isinstance(name, str) or name not in USERS:
            raise Refused(400, f"unknown user {name!r}; one of {', '.join(USERS)}")
        return USERS[name]

    def _place(self, team: object, pane: object = None, user: str = "") -> Place:
        """The workspace the page names (the first when it names none); its person's DM
        with the app when the page's `pane` is the DM's."""
        place = self.places.find(team)
        if place is None:
            raise Refused(400, f"unknown workspace {team!r}")
        return self.dm(user, place) if pane == "dm" else place

    def dm(self, user: str, place: Place) -> Place:
        return dm_place(place, user, self.places.all.index(place))

    def _thread(self, value: object, place: Place | None = None) -> str | None:
        """None, or a thread (a top-level message) of the workspace's channel."""
        if value in (None, ""):
            return None
        channel = (place or self.places.all[0]).channel
        message = self.api.messages.get((channel, value)) if isinstance(value, str) else None
        if message is None or message.thread_ts or message.ephemeral_to:
            raise Refused(400, f"no such thread: {value!r}")
        return message.ts

    @staticmethod
    async def _json(request: web.Request) -> dict[str, Any]:
        try:
            data = await request.json()
        except ValueError:
            raise Refused(400, "not JSON") from None
        if not isinstance(data, dict):
            raise Refused(400, "expected a JSON object")
        return data

    @staticmethod
    def _text(data: dict[str, Any], name: str, limit: int = 40_000) -> str:
        value = data.get(name, "")
        if not isinstance(value, str) or len(value) > limit:
            raise Refused(400, f"{name}: expected text up to {limit} characters")
        return value

    def routes(self) -> list[web.RouteDef]:
        nonce = secrets.token_urlsafe(16)
        page = (
            resources.files("bot.standin")
            .joinpath("page.html")
            .read_text(encoding="utf-8")
            .replace("{{PAGE_TOKEN}}", self.page_token)
            .replace("{{NONCE}}", nonce)
        )
        page_headers = {
            "Content-Security-Policy": (
                f"default-src 'self'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
                "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
            ),
            "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-store",
        }

        async def index(request: web.Request) -> web.Response:
            return web.Response(text=page, content_type="text/html", headers=page_headers)

        async def get_state(request: web.Request) -> web.Response:
            """At once; with `seen` (the etag the page has), once there is something new."""
            user = self._user(request.query.get("user"))
            place = self._place(request.query.get("team"))
            seen = request.query.get("seen")
            state = await self.watch(user, seen, place=place) if seen else self.state(user, place)
            return web.json_response(state)

        async def post(request: web.Request) -> web.Response:
            data = await self._json(request)
            user = self._user(data.get("user"))
            place = self._place(data.get("team"), data.get("pane"), user)
            text = self._text(data, "text").strip()
            thread_ts = self._thread(data.get("thread_ts"), place)
            try:
                files = uploads(data.get("files"))
            except ValueError as exc:
                raise Refused(400, str(exc)) from None
            if not text and not files:
                raise Refused(400, "empty message")
            if text.startswith("/") and not files:
                command, _, rest = text.partition(" ")
                self.command(user, command, rest.strip(), thread_ts, place)
            else:
                self.post_message(user, text, thread_ts, place, files)
            return web.json_response({"ok": True, "queued": self.bot_state not in UP})

        async def click(request: web.Request) -> web.Response:
            data = await self._json(request)
            user = self._user(data.get("user"))
            place = self._place(data.get("team"), data.get("pane"), user)
            ts = self._text(data, "ts", 40)
            ephemeral = None
            if data.get("ephemeral") is not None:
                ephemeral = self.only_you.find(user, data["ephemeral"])
                if ephemeral is None:
                    raise Refused(400, "no such message only visible to you")
            elif ts and (place.channel, ts) not in self.api.messages:
                raise Refused(400, f"no such message: {ts!r}")
            self.click(
                user,
                ts,
                self._text(data, "action_id", 255),
                self._text(data, "value", 2000),
                self._thread(data.get("thread_ts"), place),
                self._text(data, "label", 100),
                ephemeral=ephemeral,
                place=place,
            )
            return web.json_response({"ok": True, "queued": self.bot_state not in UP})

        async def dismiss(request: web.Request) -> web.Response:
            data = await self._json(request)
            user = self._user(data.get("user"))
            ephemeral_id = data.get("id")
            if not isinstance(ephemeral_id, int):
                raise Refused(400, "id: expected a number")
            return web.json_response({"ok": self.only_you.dismiss(user, ephemeral_id)})

        async def restart(request: web.Request) -> web.Response:
            await self._json(request)
            self.background(self.restart_bot())
            return web.json_response({"ok": True})

        return [
            web.get("/", index),
            web.get("/ui/state", get_state),
            web.post("/ui/post", post),
            web.post("/ui/click", click),
            web.post("/ui/dismiss", dismiss),
            web.post("/ui/restart", restart),
            *ContainerRoutes(self).routes(),
            *self.api.routes(),
        ]

    # -- serving --------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """The page and the Web API on loopback, and the outbox delivering; the bot (when
        started) is stopped on the way out. LocalModeError when the port is taken."""
        self.load()
        # Room for the files the page may attach (base64 in JSON: 4/3 of UPLOAD_BYTES).
        app = web.Application(middlewares=[self.guard], client_max_size=UPLOAD_BYTES * 3 // 2)
        app.add_routes(self.routes())
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, LOOPBACK, self.port).start()
        except OSError as exc:
            await runner.cleanup()
            raise port_in_use(self.port, "PORT", "the page's", exc) from exc
        self.http = aiohttp.ClientSession()
        delivery = asyncio.create_task(self.deliver_forever())
        try:
            yield
        finally:
            self._stopping = True
            delivery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await delivery
            await self.stop_bot()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self.save()
            await self.http.close()
            await runner.cleanup()
            if self._store is not None:
                self._store.close()
            self.log.close()


async def run_workspace(
    data_dir: Path,
    port: int,
    bot_port: int,
    *,
    demo: bool,
    storage: StorageSettings | None = None,
    oauth: bool = False,
) -> None:
    """Serve the stand-in and run the bot behind it until SIGINT/SIGTERM. `data_dir` exists.
    LocalModeError (one line to print) when a port is taken. `oauth`: two workspaces, the
    app installed in each through the OAuth flow (see `local_workspaces`)."""
    workspace = Workspace(data_dir, port, bot_port, demo=demo, storage=storage, oauth=oauth)
    async with workspace.serving():
        check_port_free(bot_port, "BOT_LOCAL_BOT_PORT", "the bot's")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        model = "offline demo model (no OPENAI_API_KEY)" if demo else "OpenAI"
        print(f"local mode: open http://{LOOPBACK}:{port}", flush=True)
        workspace._say(f"model: {model}; state in {data_dir}; this log: {workspace.log.path}")
        # Ctrl-C while the bot is still starting stops at once (a slow machine takes many
        # seconds to start it): the start is given up, and the bot stopped on the way out.
        starting = asyncio.create_task(workspace.start_bot())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            return
        took = starting.result()
        if took is not None and workspace.bot is not None:
            queued = f"; delivering {len(workspace.outbox)} queued" if workspace.outbox else ""
            workspace._say(f"bot started: pid {workspace.bot.pid} up in {took:.1f} s{queued}")
        await stopping
