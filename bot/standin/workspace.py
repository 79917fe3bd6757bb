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

`Workspace` puts local mode together and keeps its state across a Ctrl-C; each part has a
room of its own: the child bot (`supervisor`, the conversations a restart interrupted in
`recovery`), the outbox (`outbox`, filled by `page_actions`), what the page shows
(`page_state`), who may ask (`page_input`), the endpoints (`workspace_routes`,
`container_routes`), the workspaces (`local_workspaces`), what one person alone sees
(`ephemeral`), the log (`local_log`). It is a development tool, not part of the served bot."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import secrets
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from bot.standin.background import Background
from bot.standin.container import dump_container, load_container
from bot.standin.ephemeral import OnlyYou
from bot.standin.errors import LOOPBACK, LocalModeError, check_port_free, port_in_use
from bot.standin.local_log import LocalLog
from bot.standin.local_workspaces import USERS, Places
from bot.standin.outbox import Outbox
from bot.standin.page_actions import PageActions
from bot.standin.page_input import TOKEN_HEADER, PageGuard, PageNames
from bot.standin.page_state import PageState
from bot.standin.people_files import UPLOAD_BYTES
from bot.standin.recovery import Recovery
from bot.standin.slack_api import Call, Message, SlackWebApi
from bot.standin.supervisor import BotSupervisor, ChildBot, Restarted
from bot.standin.view import CHANNEL, permalink, title
from bot.standin.workspace_routes import WorkspaceRoutes

__all__ = [
    "CHANNEL",
    "TOKEN_HEADER",
    "USERS",
    "LocalModeError",
    "Workspace",
    "permalink",
    "run_workspace",
    "title",
]

if TYPE_CHECKING:
    from storage import StorageSettings


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
        page_url, bot_url = f"http://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{bot_port}"
        self.bot_token = f"xoxb-local-{secrets.token_hex(12)}"
        self.api = SlackWebApi(token=self.bot_token)  # with agent sessions: the page shows them
        # One workspace (a bot token), or two installed through the OAuth flow (`oauth`).
        self.places = Places(self.api, oauth=oauth, page_url=page_url, bot_url=bot_url)
        self.api.base_url = page_url  # where the bot downloads files
        self.api.people = {uid: name for name, uid in USERS.items()}
        self.data_dir = data_dir
        self.port = port
        self.secret = secrets.token_hex(16)
        self.page_token = secrets.token_urlsafe(24)
        self.state_file = data_dir / "standin.json"
        self.log = LocalLog(data_dir)  # the terminal names only the page's URL
        self.background = Background()
        self.only_you = OnlyYou(self.api, page_url)
        self.outbox = Outbox(
            self.api,
            self.places,
            secret=self.secret,
            bot_url=bot_url,
            save=self.save,
            bot_up=lambda: self.supervisor.up,  # the supervisor, made next, wakes the outbox
        )
        child = ChildBot(self.bot_token, self.secret, port, bot_port, data_dir, self.places, demo)
        self.supervisor = BotSupervisor(
            child,
            Recovery(storage, self.places, self.log),
            self.log,
            self.background,
            on_state=self.outbox.wake,
        )
        self.actions = PageActions(self.api, self.places, self.only_you, self.outbox)
        self.page_state = PageState(
            self.api, self.places, self.only_you, self.outbox, self.supervisor, demo=demo
        )
        self.guard = PageGuard(port, self.page_token)
        self.names = PageNames(self.api, self.places)
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
            self.outbox.items = list(saved.get("outbox", []))
            self.places.load(saved.get("installs") or {})
            self.only_you.responders = dict(saved.get("responders", {}))
            load_container(self.api, saved)
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
            "outbox": self.outbox.items,
            "responders": self.only_you.responders,
            "installs": self.places.dump(),
            **dump_container(self.api),
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(saved, ensure_ascii=False, indent=1), encoding="utf-8")
        tmp.replace(self.state_file)

    def _on_call(self, call: Call) -> None:
        self.only_you.on_call(call)
        self.save()

    # -- the bot ---------------------------------------------------------------------------

    async def restart_bot(self) -> None:
        """The page's "Restart bot": kill it, start a new one; the log says how it went."""
        restarted = await self.supervisor.restart()
        if restarted is not None:
            self.log.say(self._restarted(restarted))

    def _restarted(self, restarted: Restarted) -> str:
        resuming = len(self.supervisor.recovery.interrupted)
        after = (
            f"resuming {resuming} interrupted conversation{'s' * (resuming != 1)}"
            if resuming
            else "nothing was interrupted"
        )
        return (
            f"bot restarted: pid {restarted.killed} killed, pid {restarted.pid} up in "
            f"{restarted.took:.1f} s; {after}{self.queued()}"
        )

    def queued(self) -> str:
        """For the log: what the outbox is about to deliver, if anything."""
        items = self.outbox.items
        return f"; delivering {len(items)} queued" if items else ""

    # -- serving --------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """The page and the Web API on loopback, and the outbox delivering; the bot (when
        started) is stopped on the way out. LocalModeError when the port is taken."""
        self.load()
        # Room for the files the page may attach (base64 in JSON: 4/3 of UPLOAD_BYTES).
        app = web.Application(
            middlewares=[self.guard.middleware], client_max_size=UPLOAD_BYTES * 3 // 2
        )
        app.add_routes(WorkspaceRoutes(self).routes())
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, LOOPBACK, self.port).start()
        except OSError as exc:
            await runner.cleanup()
            raise port_in_use(self.port, "PORT", "the page's", exc) from exc
        http = self.supervisor.http = self.outbox.http = aiohttp.ClientSession()
        delivery = asyncio.create_task(self.outbox.deliver_forever())
        try:
            yield
        finally:
            self.supervisor.stopping = True
            delivery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await delivery
            await self.supervisor.stop()
            await self.background.cancel()
            self.save()
            await http.close()
            await runner.cleanup()
            self.supervisor.recovery.close()
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
        model = workspace.supervisor.child.model([])
        print(f"local mode: open http://{LOOPBACK}:{port}", flush=True)
        workspace.log.say(f"model: {model}; state in {data_dir}; this log: {workspace.log.path}")
        # Ctrl-C while the bot is still starting stops at once (a slow machine takes many
        # seconds to start it): the start is given up, and the bot stopped on the way out.
        starting = asyncio.create_task(workspace.supervisor.start())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            return
        took, bot = starting.result(), workspace.supervisor.bot
        if took is not None and bot is not None:
            workspace.log.say(f"bot started: pid {bot.pid} up in {took:.1f} s{workspace.queued()}")
        if warning := workspace.supervisor.model_warning:  # its runs would stop: said at once
            workspace.log.tell(warning)
        await stopping
