"""`python -m bot serve`: Socket Mode or HTTP (`POST /slack/events`), plus `GET /healthz`,
`GET /metrics`, and a recovery sweep that resumes threads whose process died."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

from bot import metrics
from bot.runtime import ConversationRuntime
from bot.slackapp.app import build_app, web_client
from bot.slackapp.poster import SlackPoster
from bot.slackapp.settings import SlackSettings
from storage import ConversationKey, Store

log = logging.getLogger(__name__)
HEALTH_KEY = ConversationKey(team="healthz", channel="healthz", thread_ts="0")


def health_routes(store: Store) -> list[web.RouteDef]:
    async def healthz(request: web.Request) -> web.Response:
        try:
            await asyncio.wait_for(asyncio.to_thread(store.get, HEALTH_KEY), timeout=5)
        except Exception as exc:  # any storage failure means unhealthy
            return web.json_response({"ok": False, "storage": str(exc)[:200]}, status=503)
        return web.json_response({"ok": True})

    async def metrics_page(request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(metrics.REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    return [web.get("/healthz", healthz), web.get("/metrics", metrics_page)]


async def recovery_sweep(runtime: ConversationRuntime, interval: float) -> None:
    """At start-up, then every `interval`: resume threads left `running` by a dead process."""
    while True:
        try:
            outcomes = await runtime.recover()
            if outcomes:
                metrics.RESUMES.labels("recovery").inc(len({o.key for o in outcomes}))
        except Exception:
            log.exception("recovery sweep failed; trying again in %ss", interval)
        await asyncio.sleep(interval)


async def serve(
    settings: SlackSettings,
    runtime: ConversationRuntime,
    admins: frozenset[str],
    *,
    stop: asyncio.Event | None = None,
    host: str | None = None,
) -> None:
    """Serve until `stop` is set (or SIGTERM/SIGINT when no event is given)."""
    client = web_client(settings)
    runtime.on_outcome = SlackPoster(client)
    app = build_app(settings, runtime, client, admins)
    if settings.socket_mode:
        web_app = web.Application()
    else:
        web_app = app.web_app(path="/slack/events", port=settings.port)
    web_app.add_routes(health_routes(runtime.store))
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host=os.getenv("HOST", "0.0.0.0"), port=settings.port)
    await site.start()
    mode = "Socket Mode" if settings.socket_mode else f"HTTP on :{settings.port}/slack/events"
    log.info("serving Slack (%s) as %s", mode, runtime.owner)
    print(f"bot: serving Slack ({mode}); health on :{settings.port}/healthz", flush=True)

    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    sweep = asyncio.create_task(
        recovery_sweep(runtime, runtime.store.lease_duration.total_seconds())
    )
    socket_handler = None
    if settings.socket_mode:
        socket_handler = AsyncSocketModeHandler(app, settings.app_token)
        await socket_handler.connect_async()  # type: ignore[no-untyped-call]
    try:
        await stop.wait()
    finally:
        sweep.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweep
        if socket_handler is not None:
            await socket_handler.close_async()  # type: ignore[no-untyped-call]
        await runner.cleanup()
