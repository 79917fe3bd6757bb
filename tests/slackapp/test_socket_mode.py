"""Socket Mode against a local websocket server speaking Slack's envelope protocol."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import websockets

from bot.settings import RuntimeSettings
from bot.slackapp.settings import SlackSettings
from bot.standin import requests
from bot.standin.slack_api import SlackWebApi
from bot.wiring import serve_slack
from storage.local import LocalStore
from testkit.runtime import SideEffects, build_agent, echo_model
from testkit.services import free_port
from testkit.slack import CHANNEL, TEAM, running_api, runtime_of


async def test_socket_mode_event_is_acked_and_answered(
    local_store: LocalStore, effects: SideEffects
) -> None:
    acks: list[dict[str, Any]] = []
    connected = asyncio.Event()
    api = SlackWebApi(team=TEAM)
    message = api.add_user_message(CHANNEL, "UALICE", "<@UBOT> over the socket")
    envelope = {
        "envelope_id": "env-1",
        "type": "events_api",
        "accepts_response_payload": False,
        "retry_attempt": 0,
        "retry_reason": "",
        "payload": {
            "token": "legacy",
            "team_id": TEAM,
            "api_app_id": "A0BOT",
            "type": "event_callback",
            "event_id": "EvSocket1",
            "event_time": int(time.time()),
            "event": requests.app_mention(
                user="UALICE", text=message.text, ts=message.ts, channel=CHANNEL
            ),
        },
    }

    async def slack_side(socket: Any) -> None:
        connected.set()
        await socket.send(json.dumps({"type": "hello", "num_connections": 1}))
        await socket.send(json.dumps(envelope))
        async for frame in socket:
            acks.append(json.loads(frame))

    async with websockets.serve(slack_side, "127.0.0.1", 0) as ws_server:
        ws_port = ws_server.sockets[0].getsockname()[1]
        api.socket_url = f"ws://127.0.0.1:{ws_port}/link"
        async with running_api(api) as api_url:
            runtime = runtime_of(local_store, build_agent(echo_model(), effects), RuntimeSettings())
            settings = SlackSettings(
                SLACK_BOT_TOKEN="xoxb-test",
                SLACK_APP_TOKEN="xapp-test",
                SLACK_API_URL=f"{api_url}/api/",
                PORT=free_port(),
            )
            stop = asyncio.Event()
            task = asyncio.create_task(
                serve_slack(
                    settings, local_store, runtime, frozenset(), stop=stop, host="127.0.0.1"
                )
            )
            try:
                await asyncio.wait_for(connected.wait(), 30)
                [answer] = await api.wait_for(lambda: api.bot_replies(CHANNEL, message.ts))
                assert answer.text == "echo: over the socket"
                assert [a["envelope_id"] for a in acks] == ["env-1"]  # acked once
                assert len(api.called("apps.connections.open")) >= 1
                health = f"http://127.0.0.1:{settings.port}/healthz"
                async with aiohttp.ClientSession() as http, http.get(health) as response:
                    assert response.status == 200
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)
