"""People and files in the Web API stand-in: `users.info` for the names it knows, and files
people share (`add_file`), downloaded like Slack's `url_private`: a GET with the bot token as
`Authorization: Bearer`; without it Slack answers its sign-in page (HTML), and so does this."""

from __future__ import annotations

import base64
import itertools
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from aiohttp import web

from bot.standin.records import Call


@dataclass
class StoredFile:
    id: str
    name: str
    mimetype: str
    data: bytes


class PeopleAndFiles:
    """The methods, mixed into `SlackWebApi` (which owns `token`, `bot_user`, `_record` and
    `_auth_error`)."""

    token: str | None
    bot_user: str

    def __init__(self) -> None:
        self.people: dict[str, str] = {}  # user id -> display name (users.info)
        self.files: dict[str, StoredFile] = {}
        self.base_url = ""  # where this stand-in is served (for url_private)
        self._file_ids = itertools.count(1)

    def _record(self, call: Call) -> None:
        raise NotImplementedError

    def _auth_error(self, request: web.Request, args: dict[str, Any]) -> tuple[str | None, Any]:
        raise NotImplementedError

    def m_users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = str(args["user"])
        name = "agent" if user == self.bot_user else self.people.get(user)
        if name is None:
            return {"ok": False, "error": "user_not_found"}
        profile = {"display_name": name, "real_name": name}
        return {"ok": True, "user": {"id": user, "name": name.lower(), "profile": profile}}

    def add_file(self, name: str, mimetype: str, data: bytes) -> dict[str, Any]:
        """Keep a file someone shares; returns it as a message event describes it."""
        file_id = f"F{next(self._file_ids):08d}"
        self.files[file_id] = StoredFile(file_id, name, mimetype, data)
        url = f"{self.base_url}/files/{file_id}/{quote(name)}"
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "size": len(data),
            "mode": "hosted",
            "url_private": url,
            "url_private_download": url + "?download=1",
        }

    def file_routes(self) -> list[web.RouteDef]:
        return [web.get("/files/{id}/{name}", self._download)]

    async def _download(self, request: web.Request) -> web.Response:
        file = self.files.get(request.match_info["id"])
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        refused, _ = self._auth_error(request, {})
        allowed = refused is None
        method = "files.download" if allowed else "files.download:refused"
        self._record(Call(method, {"file": request.match_info["id"], "token": bool(given)}))
        if not allowed:
            return web.Response(text="<html>Sign in to Slack</html>", content_type="text/html")
        if file is None:
            return web.Response(status=404, text="file not found")
        return web.Response(body=file.data, content_type=file.mimetype)


UPLOAD_BYTES = 12 * 1024 * 1024  # files the page attaches to one message, in all
UPLOAD_FILES = 5


def uploads(value: object) -> list[tuple[str, str, bytes]]:
    """The files local mode's page attached: `[{name, mimetype, data (base64)}]`, checked
    (ValueError says what is wrong)."""
    if value in (None, []):
        return []
    if not isinstance(value, list) or len(value) > UPLOAD_FILES:
        raise ValueError(f"files: a list of at most {UPLOAD_FILES}")
    found: list[tuple[str, str, bytes]] = []
    for item in value:
        name = item.get("name") if isinstance(item, dict) else None
        mimetype = item.get("mimetype") if isinstance(item, dict) else None
        if not (isinstance(name, str) and 0 < len(name) <= 255 and "/" not in name):
            raise ValueError("files: each needs a name (no slashes)")
        if not (isinstance(mimetype, str) and len(mimetype) <= 127):
            raise ValueError("files: each needs a mimetype")
        try:
            data = base64.b64decode(str(item.get("data", "")), validate=True)
        except (ValueError, TypeError):
            raise ValueError("files: data is base64") from None
        found.append((name, mimetype or "application/octet-stream", data))
    if sum(len(data) for _, _, data in found) > UPLOAD_BYTES:
        raise ValueError(f"files: at most {UPLOAD_BYTES // (1024 * 1024)} MB in all")
    return found
