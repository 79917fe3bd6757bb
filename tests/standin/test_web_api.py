"""The Web API stand-in answers like Slack: the methods the bot uses, their errors, 429s."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.standin.slack_api import SlackWebApi
from testkit.slack import running_api


async def test_methods_and_errors_through_slack_sdk() -> None:
    api = SlackWebApi()
    async with running_api(api) as url:
        client = AsyncWebClient(token="xoxb-t", base_url=f"{url}/api/")
        assert (await client.auth_test())["user_id"] == api.bot_user
        posted = await client.chat_postMessage(channel="C1", text="hello", thread_ts="1.000001")
        ts = posted["ts"]
        assert api.messages[("C1", ts)].thread_ts == "1.000001"
        await client.chat_update(channel="C1", ts=ts, text="edited", blocks=[{"type": "divider"}])
        assert api.messages[("C1", ts)].text == "edited"
        assert api.messages[("C1", ts)].blocks == [{"type": "divider"}]
        await client.reactions_add(channel="C1", timestamp=ts, name="eyes")
        for call, error in (
            (client.reactions_add(channel="C1", timestamp=ts, name="eyes"), "already_reacted"),
            (client.chat_update(channel="C1", ts="9.9", text="x"), "message_not_found"),
            (client.chat_postMessage(channel="C1", text="x" * 40_001), "msg_too_long"),
            (client.api_call("no.such.method"), "unknown_method"),
        ):
            try:
                await call
                raise AssertionError(f"expected {error}")
            except SlackApiError as exc:
                assert exc.response["error"] == error
        await client.reactions_remove(channel="C1", timestamp=ts, name="eyes")
        assert api.messages[("C1", ts)].reactions == set()
        api.rate_limited["chat.postMessage"] = 1
        try:
            await client.chat_postMessage(channel="C1", text="once")  # no retry handler here
            raise AssertionError("expected a 429")
        except SlackApiError as exc:
            assert exc.response.status_code == 429 and exc.response.headers["Retry-After"] == "1"
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{url}/respond/tok1", json={"text": "only you", "response_type": "ephemeral"}
            ) as response,
        ):
            assert response.status == 200
        assert api.responses == [
            {"text": "only you", "response_type": "ephemeral", "_token": "tok1"}
        ]
        assert [c.method for c in api.calls][:2] == ["auth.test", "chat.postMessage"]


async def test_a_held_post_lands_when_released_even_with_its_caller_gone() -> None:
    """`hold`: the request arrived (recorded as held) but the message is not in the thread;
    the caller gives up (a process killed), and the post still lands once released. Then
    chat.delete removes the bot's message (never a person's) and is recorded."""
    api = SlackWebApi()
    async with running_api(api) as url:
        client = AsyncWebClient(token="xoxb-t", base_url=f"{url}/api/")
        question = api.add_user_message("C1", "UALICE", "hello")
        release = api.hold("chat.postMessage")
        posting = asyncio.create_task(
            client.chat_postMessage(channel="C1", text="late", thread_ts=question.ts)
        )
        await api.wait_for(lambda: api.called("chat.postMessage:held"))
        assert api.bot_replies("C1", question.ts) == []
        posting.cancel()  # the caller is gone; Slack has the request
        with contextlib.suppress(asyncio.CancelledError):
            await posting
        release.set()
        [landed] = await api.wait_for(lambda: api.bot_replies("C1", question.ts))
        assert landed.text == "late" and len(api.called("chat.postMessage")) == 1
        assert "chat.postMessage" not in api.holds  # only the next call was held
        await client.chat_postMessage(channel="C1", text="at once", thread_ts=question.ts)
        await client.chat_delete(channel="C1", ts=landed.ts)
        assert [m.text for m in api.bot_replies("C1", question.ts)] == ["at once"]
        assert api.called("chat.delete")[0].args["ts"] == landed.ts
        try:
            await client.chat_delete(channel="C1", ts=question.ts)
            raise AssertionError("deleted a person's message")
        except SlackApiError as exc:
            assert exc.response["error"] == "cant_delete_message"
