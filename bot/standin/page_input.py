"""What the page may ask. The page signs requests as alice or bob, so only the page may ask:
every request names this machine's page in its Host (no DNS rebinding), and the page's own
endpoints (`/ui/…`) also want the per-start token embedded in the page, a same-origin
`Origin` when there is one, and JSON. What a request names is checked too: a person of
`USERS`, a workspace the page shows, a thread of its channel. Refused otherwise."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from bot.standin.errors import LOOPBACK, PageRequestRefused
from bot.standin.local_workspaces import USERS, Place, Places
from bot.standin.slack_api import SlackWebApi

log = logging.getLogger(__name__)
TOKEN_HEADER = "X-Standin-Token"


class PageGuard:
    def __init__(self, port: int, page_token: str) -> None:
        self.port = port
        self.page_token = page_token
        self.hosts = {f"{LOOPBACK}:{port}", f"localhost:{port}"}
        if port == 80:
            self.hosts |= {LOOPBACK, "localhost"}
        self.origins = {f"http://{host}" for host in self.hosts}

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        """Every request names this machine's page in its Host (no DNS rebinding); the
        page's own endpoints also want its token, its origin, and JSON."""
        try:
            if request.host not in self.hosts:
                raise PageRequestRefused(
                    403, f"wrong Host {request.host!r}; open http://{LOOPBACK}:{self.port}"
                )
            if request.path.startswith("/ui/"):
                self._check_page(request)
            response: web.StreamResponse = await handler(request)
            return response
        except PageRequestRefused as refused:
            log.warning("refused %s %s: %s", request.method, request.path, refused.error)
            return web.json_response({"ok": False, "error": refused.error}, status=refused.status)

    def _check_page(self, request: web.Request) -> None:
        origin = request.headers.get("Origin")
        if origin is not None and origin not in self.origins:
            raise PageRequestRefused(403, f"cross-origin request from {origin!r}")
        given = request.headers.get(TOKEN_HEADER, "").encode()
        if not hmac.compare_digest(given, self.page_token.encode()):
            raise PageRequestRefused(403, "missing or wrong page token; reload the page")
        if request.method == "POST" and request.content_type != "application/json":
            raise PageRequestRefused(400, "the page sends application/json")


async def json_body(request: web.Request) -> dict[str, Any]:
    try:
        data = await request.json()
    except ValueError:
        raise PageRequestRefused(400, "not JSON") from None
    if not isinstance(data, dict):
        raise PageRequestRefused(400, "expected a JSON object")
    return data


def text_field(data: dict[str, Any], name: str, limit: int = 40_000) -> str:
    value = data.get(name, "")
    if not isinstance(value, str) or len(value) > limit:
        raise PageRequestRefused(400, f"{name}: expected text up to {limit} characters")
    return value


def user_id(name: object) -> str:
    """The id of the person the page names: one of `USERS`, by name, never a raw id."""
    if not isinstance(name, str) or name not in USERS:
        raise PageRequestRefused(400, f"unknown user {name!r}; one of {', '.join(USERS)}")
    return USERS[name]


class PageNames:
    """The workspaces and threads a request of the page may name."""

    def __init__(self, api: SlackWebApi, places: Places) -> None:
        self.api = api
        self.places = places

    def place(self, team: object, pane: object = None, user: str = "") -> Place:
        """The workspace the page names (the first when it names none); its person's DM
        with the app when the page's `pane` is the DM's."""
        place = self.places.find(team)
        if place is None:
            raise PageRequestRefused(400, f"unknown workspace {team!r}")
        return self.places.dm(user, place) if pane == "dm" else place

    def thread(self, value: object, place: Place | None = None) -> str | None:
        """None, or a thread (a top-level message) of the workspace's channel."""
        if value in (None, ""):
            return None
        channel = (place or self.places.all[0]).channel
        message = self.api.messages.get((channel, value)) if isinstance(value, str) else None
        if message is None or message.thread_ts or message.ephemeral_to:
            raise PageRequestRefused(400, f"no such thread: {value!r}")
        return message.ts
