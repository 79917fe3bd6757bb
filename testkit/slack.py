"""The real bolt app in HTTP mode, served in-process on loopback, fed properly signed
requests, talking to the recording stand-in of the Slack Web API."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from aiohttp import web

from bot.runtime import ConversationRuntime
from bot.slackapp.server import serve
from bot.slackapp.settings import SlackSettings
from bot.standin import requests
from bot.standin.slack_api import Message, SlackWebApi
from storage import Conversation, ConversationKey, Status, Store
from testkit.services import free_port

SECRET = "test-signing-secret"
TEAM = "T0LOCAL"
CHANNEL = "C0GENERAL"


def thread_key(thread_ts: str, channel: str = CHANNEL) -> ConversationKey:
    """The conversation of a thread in the harness's workspace."""
    return ConversationKey(team=TEAM, channel=channel, thread_ts=thread_ts)


def signed_headers(
    body: str, *, secret: str = SECRET, timestamp: int | None = None
) -> dict[str, str]:
    return requests.signed_headers(body, secret, timestamp=timestamp)


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


class Harness:
    def __init__(
        self, api: SlackWebApi, api_url: str, bot_url: str, runtime: ConversationRuntime
    ) -> None:
        self.api = api
        self.api_url = api_url
        self.bot_url = bot_url
        self.runtime = runtime
        self.http = aiohttp.ClientSession()

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
        return requests.event_callback(TEAM, event, event_id)

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
        mention = requests.app_mention(**said, thread_ts=thread_ts, team=TEAM)
        if files:
            mention["files"] = files
        assert await self.send_event(mention) == 200
        if thread_ts:
            shared: dict[str, Any] = {"subtype": "file_share", "files": files} if files else {}
            await self.send_event(
                requests.message(**said, thread_ts=thread_ts, team=TEAM, **shared)
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
            team=TEAM,
            **shared,
        )
        assert await self.send_event(event) == 200
        return message

    async def click(self, message: Message, action_id: str, user: str) -> int:
        assert message.blocks is not None
        button = next(
            element
            for block in message.blocks
            if block["type"] == "actions"
            for element in block["elements"]
            if element["action_id"] == action_id
        )
        body = requests.block_actions(
            team=TEAM,
            user=user,
            channel=message.channel,
            message={"ts": message.ts, "text": message.text, "blocks": message.blocks},
            action_id=action_id,
            value=button["value"],
            response_url=f"{self.api_url}/respond/{uuid.uuid4().hex[:8]}",
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
            team=TEAM,
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
        )
        response = await self.post(body, requests.FORM)
        return response.status, token

    async def command(
        self, command: str, text: str, user: str, *, channel: str = CHANNEL
    ) -> tuple[int, str]:
        token = uuid.uuid4().hex[:8]
        body = requests.slash_command(
            team=TEAM,
            channel=channel,
            user=user,
            command=command,
            text=text,
            response_url=f"{self.api_url}/respond/{token}",
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
        return self.runtime.store.get(thread_key(thread_ts, channel))

    async def settled(self, thread_ts: str, status: Status, *, channel: str = CHANNEL) -> None:
        """Wait until the thread's run has released its lease in `status`."""
        key = thread_key(thread_ts, channel)
        for _ in range(300):
            record = self.runtime.store.get(key)
            if record is not None and record.status is status and record.lease_owner is None:
                return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{key} never settled in {status}")

    async def close(self) -> None:
        await self.http.close()


@asynccontextmanager
async def slack_bot(
    store: Store, runtime: ConversationRuntime, *, admins: frozenset[str] = frozenset()
) -> AsyncIterator[Harness]:
    api = SlackWebApi(team=TEAM)
    async with running_api(api) as api_url:
        port = free_port()
        settings = SlackSettings(
            SLACK_BOT_TOKEN="xoxb-test",
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=f"{api_url}/api/",
            PORT=port,
        )
        stop = asyncio.Event()
        task = asyncio.create_task(serve(settings, runtime, admins, stop=stop, host="127.0.0.1"))
        harness = Harness(api, api_url, f"http://127.0.0.1:{port}", runtime)
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
            await task
            await harness.close()
