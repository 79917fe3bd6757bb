"""The Web API stand-in answers like Slack: the methods the bot uses, their errors, 429s."""

from __future__ import annotations

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
