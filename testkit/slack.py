"""The real bolt app in HTTP mode, served in-process on loopback, fed properly signed
requests, talking to the recording stand-in of the Slack Web API: for one workspace (a bot
token), or for many (installed through the OAuth flow; `oauth_bot`, `Harness.install`)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp
from agents import Agent
from aiohttp import web

from bot.runtime import ContextSource, ConversationRuntime, OutcomeSink, Progress
from bot.settings import RuntimeSettings
from bot.slackapp.app import web_api_session
from bot.slackapp.server import run
from bot.slackapp.settings import SlackSettings
from bot.standin import requests
from bot.standin.slack_api import Message, SlackWebApi
from bot.wiring import MakeRuntime, assemble_slack
from storage import Conversation, ConversationKey, Status, Store
from storage.calls import StorageCalls
from testkit.services import free_port

SECRET = "test-signing-secret"
TEAM = "T0LOCAL"
CHANNEL = "C0GENERAL"
CLIENT_ID = "1234.5678"
CLIENT_SECRET = "test-client-secret"


def thread_key(thread_ts: str, channel: str = CHANNEL) -> ConversationKey:
    """The conversation of a thread in the harness's workspace."""
    return ConversationKey(team=TEAM, channel=channel, thread_ts=thread_ts)


def signed_headers(
    body: str, *, secret: str = SECRET, timestamp: int | None = None
) -> dict[str, str]:
    return requests.signed_headers(body, secret, timestamp=timestamp)


def button_click(
    team: str, message: Message, action_id: str, user: str, *, response_url: str, **org: Any
) -> str:
    """The form body Slack posts when `user` clicks the button `action_id` on `message`."""
    assert message.blocks is not None
    button = next(
        element
        for block in message.blocks
        if block["type"] == "actions"
        for element in block["elements"]
        if element["action_id"] == action_id
    )
    return requests.block_actions(
        team=team,
        user=user,
        channel=message.channel,
        message={"ts": message.ts, "text": message.text, "blocks": message.blocks},
        action_id=action_id,
        value=button["value"],
        response_url=response_url,
        **org,
    )


@asynccontextmanager
async def running_api(api: SlackWebApi) -> AsyncIterator[str]:
    app = web.Application()
    app.add_routes(api.routes())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    api.base_url = f"http://127.0.0.1:{port}"
    try:
        yield api.base_url
    finally:
        await runner.cleanup()


@dataclass(eq=False)
class Harness:
    """Speaks for the people of one workspace (`TEAM` unless made by `workspace`)."""

    api: SlackWebApi
    api_url: str
    bot_url: str
    runtime: ConversationRuntime
    store: Store  # the bot's storage, read directly (not through the runtime)
    http: aiohttp.ClientSession = field(default_factory=aiohttp.ClientSession)
    team: str = TEAM
    enterprise: str | None = None  # an Enterprise Grid workspace's organisation
    org_wide: bool = False  # the app is installed in the whole organisation

    def workspace(
        self, team: str, *, enterprise: str | None = None, org_wide: bool = False
    ) -> Harness:
        """The same bot, spoken to from another workspace."""
        other = copy.copy(self)
        other.team, other.enterprise, other.org_wide = team, enterprise, org_wide
        return other

    def key(self, thread_ts: str, channel: str = CHANNEL) -> ConversationKey:
        """A thread's conversation in this workspace."""
        return ConversationKey(
            team=self.team, channel=channel, thread_ts=thread_ts, enterprise=self.enterprise
        )

    async def install(self, *, scopes: str | None = None) -> str:
        """Install the app in this workspace (its organisation when org-wide) the way a
        browser does: the bot's install page, its "Add to Slack" link to Slack's authorize
        page, which sends the browser back to the bot's redirect with a code and the state
        (and the state cookie set by the install page). Returns the final page. `scopes`
        replaces the bot scopes the link asks for (an app whose scopes changed)."""
        target = self.enterprise if self.org_wide else self.team
        async with self.http.get(f"{self.bot_url}/slack/install?team={target}") as page:
            assert page.status == 200, await page.text()
            cookie = page.headers["Set-Cookie"].split(";", 1)[0]
            found = re.search(r'<a href="([^"]+)"', await page.text())
        assert found is not None
        authorize = found.group(1).replace("&amp;", "&")
        if scopes is not None:
            authorize = re.sub(r"([?&]scope=)[^&]*", rf"\g<1>{quote(scopes)}", authorize)
        async with self.http.get(authorize, allow_redirects=False) as approved:
            assert approved.status == 302, await approved.text()
            back = approved.headers["Location"]
        async with self.http.get(back, headers={"Cookie": cookie}) as done:
            text = await done.text()
            assert done.status == 200, text
            return text

    async def post(
        self, body: str, content_type: str, headers: dict[str, str] | None = None
    ) -> aiohttp.ClientResponse:
        all_headers = {"Content-Type": content_type, **signed_headers(body), **(headers or {})}
        async with self.http.post(
            f"{self.bot_url}/slack/events", data=body.encode(), headers=all_headers
        ) as response:
            await response.read()
            return response

    def event_body(self, event: dict[str, Any], event_id: str | None = None) -> str:
        return requests.event_callback(
            self.team, event, event_id, enterprise=self.enterprise, org_wide=self.org_wide
        )

    async def send_event(
        self, event: dict[str, Any], *, event_id: str | None = None, retry: int | None = None
    ) -> int:
        headers = (
            {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
            if retry
            else None
        )
        response = await self.post(self.event_body(event, event_id), "application/json", headers)
        return response.status

    async def mention(
        self,
        user: str,
        text: str,
        *,
        thread_ts: str | None = None,
        channel: str = CHANNEL,
        files: list[dict[str, Any]] | None = None,
    ) -> Message:
        """A user mentions the bot: Slack sends app_mention (and, in a thread, a message);
        `files` (from `api.add_file`) were shared with it."""
        message = self.api.add_user_message(
            channel, user, f"<@{self.api.bot_user}> {text}", thread_ts, files
        )
        said = {"user": user, "text": message.text, "ts": message.ts, "channel": channel}
        mention = requests.app_mention(**said, thread_ts=thread_ts, team=self.team)
        if files:
            mention["files"] = files
        assert await self.send_event(mention) == 200
        if thread_ts:
            shared: dict[str, Any] = {"subtype": "file_share", "files": files} if files else {}
            await self.send_event(
                requests.message(**said, thread_ts=thread_ts, team=self.team, **shared)
            )
        return message

    async def reply(
        self,
        user: str,
        text: str,
        thread_ts: str,
        *,
        channel: str = CHANNEL,
        files: list[dict[str, Any]] | None = None,
    ) -> Message:
        message = self.api.add_user_message(channel, user, text, thread_ts, files)
        shared: dict[str, Any] = {"subtype": "file_share", "files": files} if files else {}
        event = requests.message(
            user=user,
            text=text,
            ts=message.ts,
            channel=channel,
            thread_ts=thread_ts,
            team=self.team,
            **shared,
        )
        assert await self.send_event(event) == 200
        return message

    async def click(self, message: Message, action_id: str, user: str) -> int:
        body = button_click(
            self.team,
            message,
            action_id,
            user,
            response_url=f"{self.api_url}/respond/{uuid.uuid4().hex[:8]}",
            **requests.org(self.enterprise, self.org_wide),
        )
        response = await self.post(body, requests.FORM)
        return response.status

    async def press(
        self, message: Message, action_id: str, user: str, *, thumb: str = "positive"
    ) -> tuple[int, str]:
        """A click on the element with `action_id` in `message`, as Slack sends it: a button
        (in an `actions` block or a section's accessory) or one thumb (`positive` or
        `negative`) of a `feedback_buttons` element; on an ephemeral message (the Stop
        control) without the `message`. The HTTP status and the response_url's token."""
        found = next(
            (
                (index, block, element)
                for index, block in enumerate(message.blocks or [])
                for element in [*block.get("elements", []), block.get("accessory") or {}]
                if element.get("action_id") == action_id
            ),
            None,
        )
        assert found is not None, f"no {action_id!r} in {message.blocks}"
        index, block, element = found
        if element["type"] == "feedback_buttons":
            value = element[f"{thumb}_button"]["value"]
        else:
            value = element.get("value", "")
        token = uuid.uuid4().hex[:8]
        body = requests.block_actions(
            team=self.team,
            user=user,
            channel=message.channel,
            message={"ts": message.ts, "text": message.text, "blocks": message.blocks},
            action_id=action_id,
            value=value,
            response_url=f"{self.api_url}/respond/{token}",
            block_id=str(block.get("block_id") or f"b{index}"),
            action_type=str(element["type"]),
            thread_ts=message.thread_ts,
            ephemeral=message.ephemeral_to is not None,
            **requests.org(self.enterprise, self.org_wide),
        )
        response = await self.post(body, requests.FORM)
        return response.status, token

    async def command(
        self, command: str, text: str, user: str, *, channel: str = CHANNEL
    ) -> tuple[int, str]:
        token = uuid.uuid4().hex[:8]
        body = requests.slash_command(
            team=self.team,
            channel=channel,
            user=user,
            command=command,
            text=text,
            response_url=f"{self.api_url}/respond/{token}",
            **requests.org(self.enterprise, self.org_wide),
        )
        response = await self.post(body, requests.FORM)
        return response.status, token

    async def responses_for(self, token: str, count: int = 1) -> list[dict[str, Any]]:
        responses: list[dict[str, Any]] = await self.api.wait_for(
            lambda: (
                (found := [r for r in self.api.responses if r["_token"] == token])
                and len(found) >= count
                and found
            )
        )
        return responses

    async def bot_replies(
        self, thread_ts: str, count: int, *, channel: str = CHANNEL
    ) -> list[Message]:
        replies: list[Message] = await self.api.wait_for(
            lambda: len(r := self.api.bot_replies(channel, thread_ts)) >= count and r
        )
        return replies

    def record(self, thread_ts: str, *, channel: str = CHANNEL) -> Conversation | None:
        """The thread's conversation as the bot's storage has it now. The bot answers an
        event only after keeping it (or deciding not to), so right after an answered event
        this says what was kept."""
        return self.store.get(self.key(thread_ts, channel))

    async def settled(self, thread_ts: str, status: Status, *, channel: str = CHANNEL) -> None:
        """Wait until the thread's run has released its lease in `status`."""
        key = self.key(thread_ts, channel)
        for _ in range(300):
            record = self.store.get(key)
            if record is not None and record.status is status and record.lease_owner is None:
                return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{key} never settled in {status}")

    async def close(self) -> None:
        await self.http.close()


@asynccontextmanager
async def slack_bot(
    store: Store,
    make_runtime: MakeRuntime,
    *,
    admins: frozenset[str] = frozenset(),
    api: SlackWebApi | None = None,
) -> AsyncIterator[Harness]:
    """The bot for one workspace in front of a fresh Web API stand-in; `make_runtime` (e.g.
    `runtime_of`) builds its runtime on the Slack layer's ports, as `python -m bot serve`
    does. The harness's `runtime` is the one built. `api`: a stand-in already served
    (`running_api`), whose threads another bot on the same storage posted in: this bot is
    that one started again, or another replica beside it."""
    async with contextlib.AsyncExitStack() as stack:
        if api is None:
            api = SlackWebApi(team=TEAM)
            await stack.enter_async_context(running_api(api))
        api_url = api.base_url
        settings = SlackSettings(
            SLACK_BOT_TOKEN="xoxb-test",
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=f"{api_url}/api/",
            PORT=free_port(),
        )
        async with _serving(settings, api, api_url, store, make_runtime, admins) as harness:
            yield harness


def oauth_bot(
    store: Store,
    make_runtime: MakeRuntime,
    api: SlackWebApi,
    api_url: str,
    *,
    admins: frozenset[str] = frozenset(),
    rotating: bool = False,
    rotation_minutes: int = 120,
) -> AbstractAsyncContextManager[Harness]:
    """The bot for many workspaces (SLACK_CLIENT_ID and SLACK_CLIENT_SECRET, no bot token)
    in front of `api` (served at `api_url`; `running_api`), which knows the app's client and
    sends installs back to this bot. Starting another on the same storage and stand-in is a
    restart: the installations are the storage's."""
    port = free_port()
    api.configure_oauth(
        CLIENT_ID, CLIENT_SECRET, f"http://127.0.0.1:{port}/slack/oauth_redirect", rotating=rotating
    )
    settings = SlackSettings(
        SLACK_CLIENT_ID=CLIENT_ID,
        SLACK_CLIENT_SECRET=CLIENT_SECRET,
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_API_URL=f"{api_url}/api/",
        SLACK_TOKEN_ROTATION_MINUTES=rotation_minutes,
        PORT=port,
    )
    return _serving(settings, api, api_url, store, make_runtime, admins)


@asynccontextmanager
async def _serving(
    settings: SlackSettings,
    api: SlackWebApi,
    api_url: str,
    store: Store,
    make_runtime: MakeRuntime,
    admins: frozenset[str],
) -> AsyncIterator[Harness]:
    stop = asyncio.Event()
    async with web_api_session() as session:
        bot = await assemble_slack(settings, store, make_runtime, session, admins)
        task = asyncio.create_task(run(bot, stop=stop, host="127.0.0.1"))
        harness = Harness(api, api_url, f"http://127.0.0.1:{settings.port}", bot.runtime, store)
        try:
            for _ in range(200):
                try:
                    async with harness.http.get(f"{harness.bot_url}/healthz") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)
            yield harness
        finally:
            stop.set()
            try:
                await task
            finally:
                await bot.runtime.close()
                await harness.close()


def runtime_of(
    store: Store, agent: Agent[Any], settings: RuntimeSettings | None = None, **options: Any
) -> MakeRuntime:
    """A test's runtime for its own agent, built on the ports the Slack layer gives it;
    `options` are the runtime's others (e.g. `owner`)."""

    def make(
        *,
        storage_calls: StorageCalls,
        on_outcome: OutcomeSink,
        progress: Progress,
        source: ContextSource,
    ) -> ConversationRuntime:
        return ConversationRuntime(
            store,
            agent,
            settings,
            storage_calls=storage_calls,
            on_outcome=on_outcome,
            progress=progress,
            source=source,
            **options,
        )

    return make
