"""`python -m bench.plain_bot`: the bot a user would write from Slack's template, for the CPU
benchmark to measure ours against: bolt's `AsyncApp` in HTTP mode, `Runner.run` with a
`SQLiteSession` per thread, one `say()` per mention; no durability, no streaming. The same
agent as ours (`bench.responses_agent`), the same Slack stand-in (`SLACK_API_URL`).
`BENCH_PLAIN_LISTENER=none`: its listener does nothing (bolt alone, for the burst bench)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agents import Runner, SQLiteSession
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bench.responses_agent import build_agent
from bot.slackapp.server import LISTEN_BACKLOG


def build_app(db: Path) -> web.Application:
    token = os.environ["SLACK_BOT_TOKEN"]
    app = AsyncApp(
        client=AsyncWebClient(token=token, base_url=os.environ["SLACK_API_URL"]),
        signing_secret=os.environ["SLACK_SIGNING_SECRET"],
    )
    agent = build_agent()
    runs_agent = os.getenv("BENCH_PLAIN_LISTENER", "agent") == "agent"  # else bolt alone

    @app.event("app_mention")
    async def mentioned(event: dict[str, Any], say: Any) -> None:
        if not runs_agent:
            return
        thread = event.get("thread_ts") or event["ts"]
        session = SQLiteSession(thread, db)
        result = await Runner.run(agent, event["text"], session=session)
        await say(text=str(result.final_output), thread_ts=thread)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    server = app.web_app(path="/slack/events")
    server.router.add_get("/healthz", healthz)
    return server


if __name__ == "__main__":
    data = Path(os.getenv("BOT_DATA_DIR", ".plain-bot"))
    data.mkdir(parents=True, exist_ok=True)
    web.run_app(
        build_app(data / "sessions.db"),
        host=os.getenv("HOST", "127.0.0.1"),
        port=int(os.environ["PORT"]),
        backlog=LISTEN_BACKLOG,  # as ours: aiohttp's 128 makes a burst's rest reconnect
        print=None,
    )
