"""Local mode with two workspaces (`BOT_LOCAL_OAUTH=1`): the real bot (a child process, bolt's
OAuth flow) behind the stand-in, each workspace installed the way the page's Install link
does it (the bot's install page, the stand-in's consent page, the bot's redirect, back to the
page), then used from the page's endpoints, each with its own token; the installs outlive a
restart of the whole local mode."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.standin.local_workspaces import GENERAL, SECOND
from bot.standin.workspace import TOKEN_HEADER, Workspace
from storage import StorageSettings
from testkit.services import free_port

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def local_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("OPENAI_API_KEY", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "BOT_TABLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BOT_STORAGE", "local")
    monkeypatch.setenv("BOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("BOT_DEMO_DELAY", "0")


def browser_session(bot_port: int) -> aiohttp.ClientSession:
    """Cookies like a browser's: bolt's state cookie is `Secure`, which browsers keep for
    http://127.0.0.1 (a potentially trustworthy origin) too."""
    jar = aiohttp.CookieJar(unsafe=True, treat_as_secure_origin=[f"http://127.0.0.1:{bot_port}"])
    return aiohttp.ClientSession(cookie_jar=jar)


class Browser:
    def __init__(self, http: aiohttp.ClientSession, workspace: Workspace) -> None:
        self.http, self.workspace = http, workspace
        self.url = f"http://127.0.0.1:{workspace.port}"
        self.headers = {TOKEN_HEADER: workspace.page_token}

    async def state(self, team: str) -> dict[str, Any]:
        params = {"user": "alice", "team": team}
        async with self.http.get(f"{self.url}/ui/state", params=params, headers=self.headers) as r:
            assert r.status == 200, await r.text()
            return dict(await r.json())

    async def install(self, team: str) -> None:
        """Follow the page's Install link as a browser does, cookies and redirects."""
        [place] = [w for w in (await self.state(team))["workspaces"] if w["id"] == team]
        assert not place["installed"]
        async with self.http.get(place["install"]) as page:
            assert page.status == 200, await page.text()
            found = re.search(r'<a href="([^"]+)"', await page.text())
        assert found is not None
        async with self.http.get(found.group(1).replace("&amp;", "&")) as done:
            assert done.status == 200, await done.text()
            finished = await done.text()
        assert self.url in finished  # the bot's page sends the browser back to the page
        [place] = [w for w in (await self.state(team))["workspaces"] if w["id"] == team]
        assert place["installed"]

    async def post(self, team: str, text: str, thread_ts: str | None = None) -> None:
        body = {"user": "alice", "team": team, "text": text, "thread_ts": thread_ts}
        async with self.http.post(f"{self.url}/ui/post", json=body, headers=self.headers) as r:
            assert r.status == 200, await r.text()

    async def answered(self, team: str, text: str, replies: int = 1) -> dict[str, Any]:
        """The thread `text` started once the bot has replied `replies` times."""
        for _ in range(300):
            for thread in (await self.state(team))["threads"]:
                bot_replies = [r for r in thread["replies"] if r["bot"] and not r["streaming"]]
                if text in thread["text"] and len(bot_replies) >= replies:
                    return dict(thread)
            await asyncio.sleep(0.1)
        raise TimeoutError(f"no answer to {text!r} in {team}")


async def test_two_workspaces_installed_and_used_from_the_page(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    port, bot_port = free_port(), free_port()

    def local_mode() -> Workspace:
        return Workspace(data, port, bot_port, demo=True, storage=StorageSettings(), oauth=True)

    workspace = local_mode()
    async with workspace.serving(), browser_session(bot_port) as http:
        assert await workspace.supervisor.start() is not None
        browser = Browser(http, workspace)
        state = await browser.state(GENERAL.team)
        assert [w["id"] for w in state["workspaces"]] == [GENERAL.team, SECOND.team]
        assert not any(w["installed"] for w in state["workspaces"])

        # Not installed yet: the bot does not take the message.
        await browser.post(SECOND.team, "@agent anyone?")
        for _ in range(100):  # delivered: the bot answered the event
            if not workspace.outbox.items:
                break
            await asyncio.sleep(0.05)
        assert not workspace.outbox.items
        assert [c for c in workspace.api.calls if c.method != "auth.test"] == []

        await browser.install(SECOND.team)
        await browser.post(SECOND.team, "@agent hello from the second workspace")
        thread = await browser.answered(SECOND.team, "hello from the second workspace")
        await browser.install(GENERAL.team)
        await browser.post(GENERAL.team, "@agent hello from the first")
        await browser.answered(GENERAL.team, "hello from the first")
        # Each workspace's page shows its own channel only.
        assert all("first" not in t["text"] for t in (await browser.state(SECOND.team))["threads"])

    calls = [c for c in workspace.api.calls if c.args.get("channel") or c.args.get("channel_id")]
    by_channel: dict[str, set[str | None]] = {}
    for call in calls:
        channel = str(call.args.get("channel") or call.args.get("channel_id"))
        by_channel.setdefault(channel, set()).add(call.team)
    assert by_channel == {GENERAL.channel: {GENERAL.team}, SECOND.channel: {SECOND.team}}
    assert [c.method for c in workspace.api.calls if ":" in c.method] == []

    # Ctrl-C and run again: both stay installed, and the conversation goes on.
    workspace = local_mode()
    async with workspace.serving(), aiohttp.ClientSession() as http:
        assert await workspace.supervisor.start() is not None
        browser = Browser(http, workspace)
        state = await browser.state(SECOND.team)
        assert all(w["installed"] for w in state["workspaces"])
        await browser.post(SECOND.team, "and after a restart?", thread["ts"])
        await browser.answered(SECOND.team, "hello from the second workspace", replies=2)
    assert {c.team for c in workspace.api.calls if c.args.get("channel") == SECOND.channel} == {
        SECOND.team
    }
