"""`python -m bot serve`: Socket Mode or HTTP (`POST /slack/events`), plus `GET /healthz`,
`GET /metrics`, and a recovery sweep that resumes threads whose process died; with many
workspaces also bolt's install page and OAuth redirect (`GET /slack/install`,
`GET /slack/oauth_redirect`).

Stopping (SIGTERM, SIGINT): health turns 503 at once so that a load balancer drains the
replica; requests still arriving are kept (never lost) and left for the next process; runs in
flight get `BOT_SHUTDOWN_GRACE` to reach their next checkpoint and then give their threads up,
so that the next process or another replica continues at once; then the checks for
duplicate posts still waiting run at once (`duplicates`), and the agents' MCP servers are
cleaned up (connected at start, before the process reports healthy: `mcp_servers`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.signature import SignatureVerifier

from bot import metrics
from bot.runtime import ConversationRuntime, keep_beating, needs_openai_key, warm_up
from bot.slackapp.gate import NotFromSlack, signed_body, slack_request
from bot.slackapp.home import HomeTab
from bot.slackapp.oauth import install_routes
from bot.slackapp.poster import SlackPoster
from bot.slackapp.settings import SlackSettings

LISTEN_BACKLOG = 2048  # connections waiting to be accepted (the kernel caps it at somaxconn)
log = logging.getLogger(__name__)
EVENTS_PATH = "/slack/events"


def health_routes(runtime: ConversationRuntime) -> list[web.RouteDef]:
    # Agents that would call OpenAI's model without a key: the bot serves, but says so.
    key_missing = needs_openai_key(runtime.agent, runtime.settings)

    async def healthz(request: web.Request) -> web.Response:
        ok = not runtime.draining and await runtime.queries.healthy()
        body: dict[str, object] = {"ok": ok}
        if key_missing:
            body["openai_key_missing"] = key_missing
        if runtime.mcp:  # a server that is down pauses the runs that need it, not the bot
            body["mcp_down"] = runtime.mcp.down()
        return web.json_response(body, status=200 if ok else 503)

    async def metrics_page(request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(metrics.REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    return [web.get("/healthz", healthz), web.get("/metrics", metrics_page)]


def events_route(
    app: AsyncApp, verifier: SignatureVerifier, runtime: ConversationRuntime
) -> web.RouteDef:
    """Slack's requests into bolt, through the gate (`gate`): anything Slack did not sign, or
    that does not parse, gets a 4xx and one log line, and changes nothing. While one is in
    flight, new runs wait (`ConversationRuntime.acknowledging`); a request counts from when
    its signature is verified, so that no one but Slack can hold runs back (a slow unsigned
    request would otherwise delay every run by the full patience of `acks_first`)."""

    async def slack_events(request: web.Request) -> web.Response:
        try:
            body = await signed_body(request, verifier)
        except NotFromSlack as refused:
            return _refused(refused)
        with runtime.acknowledging():
            return await answered(request, body)

    async def answered(request: web.Request, body: str) -> web.Response:
        try:
            response = await app.async_dispatch(slack_request(request, body))
        except NotFromSlack as refused:
            return _refused(refused)
        except (ValueError, LookupError, TypeError, AttributeError) as exc:
            # bolt assumes Slack's shapes; a signed payload of another shape fails inside it.
            log.warning("refused a malformed request to %s: %r", EVENTS_PATH, exc)
            return web.json_response({"error": "malformed request"}, status=400)
        return await to_aiohttp_response(response)

    return web.post(EVENTS_PATH, slack_events)


def _refused(refused: NotFromSlack) -> web.Response:
    log.warning("refused a request to %s: %s", EVENTS_PATH, refused.reason)
    return refused.response()


async def recovery_sweep(runtime: ConversationRuntime, interval: float) -> None:
    """At start-up, then every `interval`: resume threads left `running` by a dead process.
    Each sweep's resumed runs go on in the background, so that a long run does not delay
    the next sweep (another host's threads are found within a lease and one interval)."""
    sweeps: set[asyncio.Task[None]] = set()

    async def sweep() -> None:
        try:
            outcomes = await runtime.recover()
            if outcomes:
                metrics.RESUMES.labels("recovery").inc(len({o.key for o in outcomes}))
        except Exception:
            log.exception("recovery sweep failed; trying again in %ss", interval)

    while not runtime.draining:
        task = asyncio.create_task(sweep())
        sweeps.add(task)
        task.add_done_callback(sweeps.discard)
        await asyncio.sleep(interval)


@dataclass(frozen=True)
class SlackBot:
    """Everything `run` serves, built whole (`bot.wiring`)."""

    settings: SlackSettings
    runtime: ConversationRuntime
    app: AsyncApp
    poster: SlackPoster
    home: HomeTab


async def run(
    bot: SlackBot,
    *,
    stop: asyncio.Event | None = None,
    host: str | None = None,
    own_process: bool = False,
) -> None:
    """Serve what `bot.wiring` built until `stop` is set (or SIGTERM/SIGINT): warmed up
    first, so that healthy means ready; then drained within the shutdown grace."""
    settings, runtime, app, poster, home = bot.settings, bot.runtime, bot.app, bot.poster, bot.home
    await runtime.start()  # the agents' MCP servers connected and listed
    await warm_up(
        runtime.storage_calls, freeze=own_process
    )  # Slack's and the storage's first connections
    web_app = web.Application()
    metrics.watch_requests(lambda: runtime.acks_first.in_flight)
    if not settings.socket_mode:
        assert settings.signing_secret, "HTTP mode needs the signing secret (settings check)"
        verifier = SignatureVerifier(settings.signing_secret)
        web_app.add_routes([events_route(app, verifier, runtime)])
    if app.oauth_flow is not None:
        web_app.add_routes(install_routes(app.oauth_flow))
    web_app.add_routes(health_routes(runtime))
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    # Slack delivers a burst over many connections at once: a listen queue of aiohttp's
    # default 128 overflows, and each connection past it waits for the client's SYN retry
    # (1 s, then 3 s), past Slack's 3 s for the slowest.
    site = web.TCPSite(
        runner, host=host or settings.host, port=settings.port, backlog=LISTEN_BACKLOG
    )
    await site.start()
    mode = "Socket Mode" if settings.socket_mode else f"HTTP on :{settings.port}{EVENTS_PATH}"
    log.info("serving Slack (%s) as %s", mode, runtime.process)
    print(f"bot: serving Slack ({mode}); health on :{settings.port}/healthz", flush=True)

    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    # A third of the lease: a dead replica's threads resume about a lease after it died.
    sweep = asyncio.create_task(recovery_sweep(runtime, runtime.queries.lease_seconds / 3))
    # What another agent paused for approval is set aside, its threads told (in the
    # background, once the MCP servers listed their tools: the fingerprint is final then).
    runtime.set_aside_changed_soon()
    # Another replica's threads are taken over seconds after it stops beating (`heartbeat`).
    beating = asyncio.create_task(keep_beating(runtime))
    socket_handler = None
    if settings.socket_mode:
        socket_handler = AsyncSocketModeHandler(app, settings.app_token)
        await socket_handler.connect_async()  # type: ignore[no-untyped-call]
    try:
        await stop.wait()
    finally:
        grace = runtime.settings.shutdown_grace.total_seconds()
        log.info("stopping: finishing runs in progress (up to %.0fs)", grace)
        sweep.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweep
        await runtime.drain(grace)
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
        await poster.close()
        await home.close()
        if socket_handler is not None:
            await socket_handler.close_async()  # type: ignore[no-untyped-call]
        await runner.cleanup()
        log.info("stopped")
