"""The page's endpoints: the page itself (with its token and a strict Content-Security-Policy),
its state, and what a person does there (post, click, dismiss, restart the bot); with the
agent container's endpoints (`container_routes`) and the Web API the bot calls. What may ask
is `page_input`'s guard's."""

from __future__ import annotations

import secrets
from importlib import resources
from typing import TYPE_CHECKING

from aiohttp import web

from bot.standin.container_routes import ContainerRoutes
from bot.standin.emoji import shortcodes_script
from bot.standin.errors import PageRequestRefused
from bot.standin.page_input import json_body, text_field, user_id
from bot.standin.people_files import uploads

if TYPE_CHECKING:
    from bot.standin.workspace import Workspace


def page(token: str, nonce: str) -> str:
    return (
        resources.files("bot.standin")
        .joinpath("page.html")
        .read_text(encoding="utf-8")
        .replace("{{PAGE_TOKEN}}", token)
        .replace("{{NONCE}}", nonce)
        .replace("{{EMOJI}}", shortcodes_script())
    )


def page_headers(nonce: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": (
            f"default-src 'self'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
            "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
        ),
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }


CACHED = {"Cache-Control": "max-age=86400"}


class WorkspaceRoutes:
    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.names = workspace.names

    def routes(self) -> list[web.RouteDef]:
        nonce = secrets.token_urlsafe(16)
        html, headers = page(self.workspace.page_token, nonce), page_headers(nonce)

        async def index(request: web.Request) -> web.Response:
            return web.Response(text=html, content_type="text/html", headers=headers)

        async def favicon(request: web.Request) -> web.Response:
            # Asked by the browser for every page: an icon, not a 404 in its console.
            return web.Response(body=icon, content_type="image/svg+xml", headers=CACHED)

        icon = resources.files("bot.standin").joinpath("favicon.svg").read_bytes()
        return [
            web.get("/", index),
            web.get("/favicon.ico", favicon),
            web.get("/ui/state", self.get_state),
            web.post("/ui/post", self.post),
            web.post("/ui/click", self.click),
            web.post("/ui/dismiss", self.dismiss),
            web.post("/ui/restart", self.restart),
            *ContainerRoutes(self.workspace).routes(),
            *self.workspace.api.routes(),
        ]

    async def get_state(self, request: web.Request) -> web.Response:
        """At once; with `seen` (the etag the page has), once there is something new."""
        page_state = self.workspace.page_state
        user = user_id(request.query.get("user"))
        place = self.names.place(request.query.get("team"))
        seen = request.query.get("seen")
        if seen:
            return web.json_response(await page_state.watch(user, seen, place=place))
        return web.json_response(page_state.state(user, place))

    async def post(self, request: web.Request) -> web.Response:
        data = await json_body(request)
        user = user_id(data.get("user"))
        place = self.names.place(data.get("team"), data.get("pane"), user)
        text = text_field(data, "text").strip()
        thread_ts = self.names.thread(data.get("thread_ts"), place)
        try:
            files = uploads(data.get("files"))
        except ValueError as exc:
            raise PageRequestRefused(400, str(exc)) from None
        if not text and not files:
            raise PageRequestRefused(400, "empty message")
        actions = self.workspace.actions
        if text.startswith("/") and not files:
            command, _, rest = text.partition(" ")
            actions.command(user, command, rest.strip(), thread_ts, place)
            return self._queued()
        posted = actions.post_message(user, text, thread_ts, place, files)
        return self._queued(posted.ts)  # the page opens the conversation a prompt started

    async def click(self, request: web.Request) -> web.Response:
        data = await json_body(request)
        user = user_id(data.get("user"))
        place = self.names.place(data.get("team"), data.get("pane"), user)
        ts = text_field(data, "ts", 40)
        ephemeral = None
        if data.get("ephemeral") is not None:
            ephemeral = self.workspace.only_you.find(user, data["ephemeral"])
            if ephemeral is None:
                raise PageRequestRefused(400, "no such message only visible to you")
        elif ts and (place.channel, ts) not in self.workspace.api.messages:
            raise PageRequestRefused(400, f"no such message: {ts!r}")
        self.workspace.actions.click(
            user,
            ts,
            text_field(data, "action_id", 255),
            text_field(data, "value", 2000),
            self.names.thread(data.get("thread_ts"), place),
            text_field(data, "label", 100),
            ephemeral=ephemeral,
            place=place,
        )
        return self._queued()

    async def dismiss(self, request: web.Request) -> web.Response:
        data = await json_body(request)
        user = user_id(data.get("user"))
        ephemeral_id = data.get("id")
        if not isinstance(ephemeral_id, int):
            raise PageRequestRefused(400, "id: expected a number")
        return web.json_response({"ok": self.workspace.only_you.dismiss(user, ephemeral_id)})

    async def restart(self, request: web.Request) -> web.Response:
        await json_body(request)
        self.workspace.background.start(self.workspace.restart_bot())
        return web.json_response({"ok": True})

    def _queued(self, ts: str | None = None) -> web.Response:
        """Taken (a message: its `ts`); `queued` when it waits in the outbox for the bot to
        be back."""
        answer = {"ok": True, "queued": not self.workspace.supervisor.up}
        return web.json_response(answer | ({"ts": ts} if ts else {}))
