"""Local mode's page endpoints, in-process, in front of a fake bot that records what reaches
it: who may ask the stand-in to sign a request (the page itself, nobody else), the durable
outbox while the bot is down, and where "only visible to you" answers show."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import pytest
from aiohttp import web
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from bot.standin.slack_api import SlackWebApi
from bot.standin.workspace import USERS, Workspace, permalink
from testkit.services import free_port
from testkit.slack import running_api

ATTACK = "/agent-admin discard stale --older-than 0"


class FakeBot:
    """Answers /healthz and records every delivery to /slack/events."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], str]] = []

    def routes(self) -> list[web.RouteDef]:
        async def healthz(request: web.Request) -> web.Response:
            return web.json_response({"ok": True})

        async def events(request: web.Request) -> web.Response:
            self.received.append((dict(request.headers), await request.text()))
            return web.Response(text="")

        return [web.get("/healthz", healthz), web.post("/slack/events", events)]


@asynccontextmanager
async def fake_bot(port: int) -> AsyncIterator[FakeBot]:
    bot = FakeBot()
    app = web.Application()
    app.add_routes(bot.routes())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield bot
    finally:
        await runner.cleanup()


class Page:
    """What the page does in a browser: its token, its Host, JSON."""

    def __init__(self, http: aiohttp.ClientSession, url: str, token: str) -> None:
        self.http, self.url, self.token = http, url, token

    async def post(self, path: str, body: dict[str, Any], **headers: str) -> tuple[int, Any]:
        all_headers = {"X-Standin-Token": self.token, **headers}
        async with self.http.post(f"{self.url}{path}", json=body, headers=all_headers) as r:
            return r.status, await r.json()

    async def state(self, user: str = "alice") -> dict[str, Any]:
        async with self.http.get(
            f"{self.url}/ui/state", params={"user": user}, headers={"X-Standin-Token": self.token}
        ) as r:
            assert r.status == 200
            return dict(await r.json())


@asynccontextmanager
async def standin(
    data_dir: Path, *, bot_up: bool = True
) -> AsyncIterator[tuple[Workspace, FakeBot, Page]]:
    await asyncio.to_thread(data_dir.mkdir, parents=True, exist_ok=True)
    port, bot_port = free_port(), free_port()
    workspace = Workspace(data_dir, port, bot_port, demo=True)
    async with fake_bot(bot_port) as bot, workspace.serving(), aiohttp.ClientSession() as http:
        workspace.supervisor.set_state("running" if bot_up else "restarting")
        url = f"http://127.0.0.1:{port}"
        async with http.get(url) as response:
            html = await response.text()
            assert response.headers["X-Frame-Options"] == "DENY"
            assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
        found = re.search(r'name="standin-token" content="([^"]+)"', html)
        assert found and found.group(1) == workspace.page_token
        yield workspace, bot, Page(http, url, found.group(1))


async def settle(workspace: Workspace) -> None:
    """Wait until the stand-in has delivered everything (an item leaves the outbox once the
    bot answered it) and finished what it does in the background (a restart)."""
    for _ in range(250):
        if not workspace.outbox.items and workspace.background.idle:
            return
        await asyncio.sleep(0.02)
    raise TimeoutError(f"still queued: {workspace.outbox.items}")


async def considered(workspace: Workspace) -> None:
    """Wait until the delivery loop has looked at the outbox since the last message was
    queued (queueing wakes it; it clears the wake-up once it has decided to wait)."""
    for _ in range(250):
        if workspace.outbox.considered:
            return
        await asyncio.sleep(0.02)
    raise TimeoutError("the delivery loop never looked at the outbox")


async def test_only_the_page_gets_requests_signed(tmp_path: Path) -> None:
    async with standin(tmp_path / "data") as (workspace, bot, page):
        http, url = page.http, page.url
        host = url.removeprefix("http://")
        body = json.dumps({"user": USERS["alice"], "text": ATTACK})
        restarts: list[bool] = []

        async def restart_bot() -> None:
            restarts.append(True)

        workspace.restart_bot = restart_bot  # type: ignore[method-assign]
        refused = [
            # The reported attack: a cross-site form-like POST, text/plain, a raw user id.
            ("POST", "/ui/post", {"Content-Type": "text/plain", "Origin": "https://evil.example"}),
            ("POST", "/ui/click", {"Content-Type": "text/plain", "Origin": "https://evil.example"}),
            ("POST", "/ui/restart", {"Content-Type": "text/plain", "Origin": "null"}),
            # JSON, even with the token, from another origin or through another Host name.
            (
                "POST",
                "/ui/post",
                {
                    "Content-Type": "application/json",
                    "X-Standin-Token": page.token,
                    "Origin": "http://evil.example",
                },
            ),
            (
                "POST",
                "/ui/post",
                {
                    "Content-Type": "application/json",
                    "X-Standin-Token": page.token,
                    "Host": f"rebound.evil.example:{workspace.port}",
                },
            ),
            # Same origin, but no token (another local page, a script without the page).
            ("POST", "/ui/post", {"Content-Type": "application/json", "Origin": f"http://{host}"}),
            ("POST", "/ui/restart", {"Content-Type": "application/json"}),
            # The token, but not JSON.
            ("POST", "/ui/post", {"Content-Type": "text/plain", "X-Standin-Token": page.token}),
        ]
        for method, path, headers in refused:
            async with http.request(method, f"{url}{path}", data=body, headers=headers) as r:
                assert r.status in (400, 403), (path, headers, r.status)
                assert (await r.json())["ok"] is False
        # Users come from the fixed list, by name: never a raw id, never someone else.
        for user in (USERS["alice"], "mallory", None, ["alice"]):
            status, answer = await page.post("/ui/post", {"user": user, "text": ATTACK})
            assert status == 400 and "unknown user" in answer["error"]
        status, _ = await page.post("/ui/post", {"user": "alice", "text": "hi", "thread_ts": "9.9"})
        assert status == 400
        # Reading is guarded too: DNS rebinding must not read the page (its token) or state.
        for path, headers in (
            ("/", {"Host": f"rebound.evil.example:{workspace.port}"}),
            ("/ui/state?user=alice", {"Host": f"rebound.evil.example:{workspace.port}"}),
            ("/ui/state?user=alice", {}),
        ):
            async with http.get(f"{url}{path}", headers=headers) as r:
                assert r.status == 403, path
                assert page.token not in await r.text()
        # The Web API the bot calls wants the bot's token.
        async with http.post(f"{url}/api/chat.postMessage", data={"channel": "C0GENERAL"}) as r:
            assert (await r.json())["error"] == "not_authed"
        await settle(workspace)
        assert bot.received == [] and workspace.outbox.items == [] and restarts == []
        assert workspace.api.messages == {}

        # The page itself still works: signed as alice, delivered once.
        status, _ = await page.post("/ui/post", {"user": "alice", "text": "/agent-admin status"})
        assert status == 200
        status, _ = await page.post("/ui/restart", {})
        assert status == 200
        await settle(workspace)
        [(headers, delivered)] = bot.received
        assert parse_qs(delivered)["user_id"] == [USERS["alice"]]
        assert SignatureVerifier(workspace.secret).is_valid_request(delivered, headers)
        assert restarts == [True]
        state = await page.state("alice")
        assert state["users"] == ["alice", "bob"]


async def test_the_page_listens_on_loopback_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOST", "0.0.0.0")
    async with standin(tmp_path / "data") as (workspace, _, _):
        socket.create_connection(("127.0.0.1", workspace.port), timeout=2).close()
        # Bound to 127.0.0.1, not 0.0.0.0: another address of this machine is refused.
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.2", workspace.port), timeout=2).close()


async def test_messages_wait_durably_for_the_bot_and_go_in_order(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with standin(data, bot_up=False) as (workspace, bot, page):
        for text in ("@agent first about the café ☕", "/agent-admin status"):
            status, answer = await page.post("/ui/post", {"user": "bob", "text": text})
            assert status == 200 and answer["queued"] is True
        thread = next(iter(workspace.api.messages.values())).ts
        await page.post("/ui/post", {"user": "bob", "text": "second", "thread_ts": thread})
        await considered(workspace)  # and kept them, the bot being down
        assert bot.received == []
        state = await page.state("bob")
        assert state["queued"] == 3  # a mention, a command, a reply
        assert state["threads"][0]["pending"] and state["threads"][0]["replies"][0]["pending"]
        assert [w["label"] for w in state["waiting"]] == ["/agent-admin status"]
        assert (await page.state("alice"))["waiting"] == []  # bob's, shown to bob
    # Ctrl-C: the stand-in stops with the messages undelivered; people can read the file.
    saved = (data / "standin.json").read_text(encoding="utf-8")
    assert "café ☕" in saved and "\\u" not in saved
    assert len(json.loads(saved)["outbox"]) == 3

    async with standin(data) as (workspace, bot, page):
        await settle(workspace)
        kinds = [
            json.loads(body)["event"]["type"] if body.startswith("{") else parse_qs(body)
            for _, body in bot.received
        ]
        assert kinds[0] == "app_mention"
        assert isinstance(kinds[1], dict) and kinds[1]["command"] == ["/agent-admin"]
        assert kinds[2:] == ["message"]
        texts = [json.loads(b)["event"]["text"] for _, b in bot.received if b.startswith("{")]
        assert texts[0].endswith("first about the café ☕") and texts[-1] == "second"
        assert workspace.outbox.items == []
        assert not any(t["pending"] for t in (await page.state("bob"))["threads"])


async def test_answers_show_where_the_command_was_typed(tmp_path: Path) -> None:
    async with standin(tmp_path / "data") as (workspace, bot, page):
        await page.post("/ui/post", {"user": "alice", "text": "@agent one"})
        thread = next(iter(workspace.api.messages.values())).ts
        await page.post("/ui/post", {"user": "alice", "text": "/agent-admin status"})
        await page.post("/ui/post", {"user": "alice", "text": "/resume", "thread_ts": thread})
        await settle(workspace)
        urls = [parse_qs(b)["response_url"][0] for _, b in bot.received if "response_url" in b]
        assert len(urls) == 2
        for response_url, text in zip(urls, ("from the bottom", "from the thread"), strict=True):
            async with page.http.post(
                response_url, json={"text": text, "response_type": "ephemeral"}
            ) as r:
                assert r.status == 200
        state = await page.state("alice")
        assert [(e["thread_ts"], e["text"]) for e in state["ephemeral"]] == [
            (None, "from the bottom"),
            (thread, "from the thread"),
        ]
        assert (await page.state("bob"))["ephemeral"] == []  # only visible to alice
        first = state["ephemeral"][0]["id"]
        status, _ = await page.post("/ui/dismiss", {"user": "bob", "id": first})
        assert len((await page.state("alice"))["ephemeral"]) == 2  # not bob's to dismiss
        status, answer = await page.post("/ui/dismiss", {"user": "alice", "id": first})
        assert status == 200 and answer["ok"]
        assert [e["text"] for e in (await page.state("alice"))["ephemeral"]] == ["from the thread"]
        [shown] = (await page.state("alice"))["threads"]
        assert shown["title"] == "one"
        assert shown["link"] == permalink(thread)
        assert re.fullmatch(r"https://local\.slack\.com/archives/C0GENERAL/p\d{16}", shown["link"])


async def test_the_web_api_wants_the_bot_token() -> None:
    api = SlackWebApi(token="xoxb-right")
    async with running_api(api) as url:
        base = f"{url}/api/"
        assert (await AsyncWebClient(token="xoxb-right", base_url=base).auth_test())["ok"]
        for token, error in (("xoxb-wrong", "invalid_auth"), (None, "not_authed")):
            with pytest.raises(SlackApiError) as refused:
                await AsyncWebClient(token=token, base_url=base).chat_postMessage(
                    channel="C1", text="forged"
                )
            assert refused.value.response["error"] == error
    assert api.messages == {}


async def test_the_page_attaches_files_the_bot_downloads_with_its_token(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(200))
    async with standin(tmp_path / "data") as (workspace, bot, page):
        attached = [
            {
                "name": "chart one.png",
                "mimetype": "image/png",
                "data": base64.b64encode(png).decode(),
            }
        ]
        status, _ = await page.post(
            "/ui/post", {"user": "alice", "text": "@agent what is this?", "files": attached}
        )
        assert status == 200
        broken_files: list[Any] = [
            [{"name": "x.png", "mimetype": "image/png", "data": "%%%"}],
            "x",
            [{}],
        ]
        for broken in broken_files:
            status, answer = await page.post(
                "/ui/post", {"user": "alice", "text": "hi", "files": broken}
            )
            assert status == 400 and answer["error"].startswith("files:")
        await settle(workspace)
        [(_, delivered)] = bot.received
        event = json.loads(delivered)["event"]
        assert event["type"] == "app_mention"
        [shared] = event["files"]
        assert (shared["name"], shared["mimetype"], shared["size"]) == (
            "chart one.png",
            "image/png",
            len(png),
        )
        # Downloaded like Slack's url_private: with the bot token, else Slack's sign-in page.
        url = shared["url_private_download"]
        auth = {"Authorization": f"Bearer {workspace.bot_token}"}
        async with page.http.get(url, headers=auth) as r:
            assert r.status == 200 and await r.read() == png
        async with page.http.get(url) as r:
            assert r.content_type == "text/html" and png not in await r.read()
        state = await page.state("alice")
        assert [t["files"] for t in state["threads"]] == [["chart one.png"]]


async def test_titles_sessions_and_prompts_outlive_a_restart_of_local_mode(tmp_path: Path) -> None:
    """Slack keeps a thread's title, its agent session and the DM's suggested prompts: so
    does the stand-in, across Ctrl-C and a new start."""
    data = tmp_path / "data"
    async with standin(data) as (workspace, _, page):
        bot = AsyncWebClient(token=workspace.bot_token, base_url=f"{page.url}/api/")
        dm = workspace.places.dm(USERS["alice"], workspace.places.all[0]).channel
        await bot.chat_postMessage(channel=dm, text="Hi! Ask me anything.")
        prompts = [{"title": "Time in Tokyo", "message": "What time is it in Tokyo?"}]
        await bot.assistant_threads_setSuggestedPrompts(channel_id=dm, prompts=prompts)
        await page.post("/ui/post", {"user": "alice", "text": "hello", "pane": "dm"})
        [asked] = [m for m in workspace.api.messages.values() if m.text == "hello"]
        await bot.assistant_threads_setTitle(channel_id=dm, thread_ts=asked.ts, title="Hello")
        await page.post("/ui/post", {"user": "alice", "text": "@agent in the channel"})
        [there] = [m for m in workspace.api.messages.values() if "channel" in m.text]
        await bot.agents_sessions_setStatus(
            channel_id=there.channel, thread_ts=there.ts, status="active", title="Channel talk"
        )
        before = await page.state()
    async with standin(data) as (workspace, _, page):
        after = await page.state()
    assert {t["ts"]: t["named"] for t in after["dm"]["threads"]}[asked.ts] == "Hello"
    assert after["threads"][0]["named"] == "Channel talk"
    assert after["threads"][0]["session"] == before["threads"][0]["session"]
    assert after["dm"]["prompts"] == before["dm"]["prompts"]


async def test_prompts_stay_under_the_greeting_until_each_is_used(tmp_path: Path) -> None:
    """As in Slack's agent container: the prompts show under the greeting they came with;
    writing something else leaves them on offer; a prompt used (its message sent) goes; the
    page learns the ts of the message it sent, to open that conversation."""
    async with standin(tmp_path / "data") as (workspace, _, page):
        bot = AsyncWebClient(token=workspace.bot_token, base_url=f"{page.url}/api/")
        dm = workspace.places.dm(USERS["alice"], workspace.places.all[0]).channel
        greeting = await bot.chat_postMessage(channel=dm, text="Hi! Ask me anything.")
        prompts = [
            {"title": "Time in Tokyo", "message": "What time is it in Tokyo?"},
            {"title": "File a ticket", "message": "File a ticket: the printer is jammed."},
        ]
        await bot.assistant_threads_setSuggestedPrompts(channel_id=dm, prompts=prompts)
        status, sent = await page.post("/ui/post", {"user": "alice", "text": "hi", "pane": "dm"})
        assert status == 200 and (dm, sent["ts"]) in workspace.api.messages
        offered = (await page.state())["dm"]["prompts"]
        assert offered["prompts"] == prompts and offered["after"] == greeting["ts"]
        used = {"user": "alice", "text": prompts[1]["message"], "pane": "dm"}
        await page.post("/ui/post", used)
        assert (await page.state())["dm"]["prompts"]["prompts"] == prompts[:1]


async def test_the_page_has_an_icon(tmp_path: Path) -> None:
    """Browsers ask every page's server for /favicon.ico: an icon, not a 404."""
    async with standin(tmp_path / "data") as (_, _, page):
        async with page.http.get(f"{page.url}/favicon.ico") as response:
            assert response.status == 200
            assert response.content_type == "image/svg+xml"
            assert (await response.read()).startswith(b"<svg")
        async with page.http.get(page.url) as response:
            assert '<link rel="icon" href="/favicon.ico"' in await response.text()
