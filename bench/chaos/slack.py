"""The Slack side of the soak: the recording Web API stand-in (`bot.standin.slack_api`) behind
a fault layer, and a deliverer that sends signed events, commands and clicks to the bot
replicas the way Slack does (events retried with `X-Slack-Retry-Num` when no 2xx comes within
3 s, up to 3 retries; commands and clicks once), to a randomly chosen live replica; and
sends one of them again when asked (`Deliverer.again`: Slack's redelivery).

The stand-in knows the replicas' bot token (one workspace) and the app's OAuth client (the
runs that serve many workspaces install them through it). Any Web API request whose
arguments carry the text an output guardrail withholds (`bench.chaos.model.MARKER`) is
recorded in `SlackSide.leaks`."""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl

import aiohttp
from aiohttp import web

from bench.chaos.classify import is_decision
from bench.chaos.model import MARKER
from bot.standin import requests
from bot.standin.slack_api import SlackWebApi

TEAM = "T0CHAOS"
SECRET = "chaos-signing-secret"
BOT_TOKEN = "xoxb-chaos"  # one workspace; the runs with an uninstall serve many (OAuth)
CLIENT_ID, CLIENT_SECRET = "chaos-client", "chaos-client-secret"
MARKDOWN_ESCAPE = re.compile(r"\\([^\w\s])")  # what the poster escapes in markdown
ACK_DEADLINE = 3.0
EVENT_RETRY_PAUSES = (0.3, 1.0, 2.0)  # Slack waits ~1 min and 5 min; compressed here
SlackFaultKind = Literal["ratelimit", "error5xx", "channel_error", "slow"]
# Methods after which the thread shows a recorded outcome: a post, a stream closed as one, a
# stream replaced by one.
POSTING = ("chat.postMessage", "chat.stopStream", "chat.update")


@dataclass
class SlackFault:
    kind: SlackFaultKind
    methods: frozenset[str] | None = None  # None: every method
    channel: str | None = None
    times: int | None = None
    until: float | None = None  # time.monotonic() deadline
    latency: float = 0.0
    retry_after: int = 1
    error: str = "not_in_channel"
    status: int = 503
    hits: int = 0

    def live(self, now: float) -> bool:
        return (self.times is None or self.hits < self.times) and (
            self.until is None or now < self.until
        )

    def matches(self, method: str, channel: str | None) -> bool:
        return (self.methods is None or method in self.methods) and (
            self.channel is None or self.channel == channel
        )


@dataclass
class Post:
    """A message the bot posted (chat.postMessage that reached the stand-in and succeeded),
    or an approval request's card edited to say its decision (`chat.update`: the same ts as
    the request, recorded apart from it). `deleted`: the bot deleted it since (a second copy
    found by its read-back)."""

    channel: str
    ts: str
    thread_ts: str | None
    args: dict[str, Any]
    at: float
    deleted: bool = False

    @property
    def shown(self) -> str:
        """The text the thread shows: an answer's markdown blocks in full (its `text` is
        only the notification's fallback, cut at 300 characters)."""
        blocks = self.args.get("blocks")
        if isinstance(blocks, str):
            blocks = json.loads(blocks) if blocks else []
        parts = [
            str(block.get("text", ""))
            for block in blocks or []
            if isinstance(block, dict) and block.get("type") == "markdown"
        ]
        if not parts:
            return str(self.args.get("text") or "")
        return MARKDOWN_ESCAPE.sub(r"\1", "\n".join(parts))  # `\[resp 3\]` reads `[resp 3]`


@dataclass
class Private:
    """An answer only one person sees: an ephemeral message (`chat.postEphemeral`), or what
    the bot sent to a request's response_url (`token` names the request)."""

    at: float
    text: str
    user: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    token: str | None = None


def _standin() -> SlackWebApi:
    api = SlackWebApi(team=TEAM, token=BOT_TOKEN)
    # Where an install goes back to: any replica's (`workspaces` sends it to a live one).
    api.configure_oauth(CLIENT_ID, CLIENT_SECRET, "http://127.0.0.1:9/slack/oauth_redirect")
    return api


@dataclass
class SlackSide:
    api: SlackWebApi = field(default_factory=_standin)
    faults: list[SlackFault] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)  # every Web API request
    posts: list[Post] = field(default_factory=list)
    private: list[Private] = field(default_factory=list)  # ephemerals and response_url answers
    leaks: list[dict[str, Any]] = field(default_factory=list)  # requests that carried `MARKER`
    last_call: float = 0.0
    url: str = ""
    _runner: web.AppRunner | None = None

    def inject(self, fault: SlackFault) -> SlackFault:
        self.faults.append(fault)
        return fault

    def heal(self, *, keep: Callable[[SlackFault], bool] = lambda f: False) -> None:
        self.faults = [f for f in self.faults if keep(f)]

    def _choose(self, method: str, channel: str | None) -> SlackFault | None:
        now = time.monotonic()
        self.faults = [f for f in self.faults if f.live(now)]
        for fault in self.faults:
            if fault.matches(method, channel):
                fault.hits += 1
                return fault
        return None

    async def start(self, port: int) -> str:
        app = web.Application(middlewares=[self._middleware])
        app.add_routes(self.api.routes())
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path.startswith("/respond/"):
            answered = await handler(request)
            token = request.path.rsplit("/", 1)[1]
            payload: dict[str, Any] = next(
                (r for r in reversed(self.api.responses) if r["_token"] == token), {}
            )
            self.private.append(Private(time.time(), str(payload.get("text", "")), token=token))
            return answered
        if not request.path.startswith("/api/"):
            return await handler(request)
        method = request.path.rsplit("/", 1)[1]
        args = await _args(request)
        channel = args.get("channel") or args.get("channel_id")  # assistant.threads.* name it so
        self.last_call = time.monotonic()
        fault = self._choose(method, channel if isinstance(channel, str) else None)
        attempt: dict[str, Any] = {
            "at": time.time(),
            "mono": time.monotonic(),
            "method": method,
            "channel": channel,
        }
        if method in ("chat.postMessage", "chat.update"):
            attempt["text"] = str(args.get("text", ""))[:200]
        self.attempts.append(attempt)
        said = json.dumps(args, default=str)
        if MARKER in said:
            at = said.index(MARKER)
            self.leaks.append(
                {
                    "at": time.time(),
                    "method": method,
                    "channel": channel,
                    "ts": args.get("thread_ts") or args.get("ts"),
                    "text": said[max(0, at - 80) : at + 40],
                }
            )
        if fault is not None:
            attempt["fault"] = fault.kind
            if fault.latency > 0:
                await asyncio.sleep(fault.latency)
            if fault.kind == "ratelimit":
                return web.json_response(
                    {"ok": False, "error": "ratelimited"},
                    status=429,
                    headers={"Retry-After": str(fault.retry_after)},
                )
            if fault.kind == "error5xx":
                return web.Response(status=fault.status, text="chaos: Slack is having trouble")
            if fault.kind == "channel_error":
                return web.json_response({"ok": False, "error": fault.error})
        response = await handler(request)
        self.last_call = time.monotonic()
        if method in (*POSTING, "chat.delete", "chat.postEphemeral") and isinstance(
            response, web.Response
        ):
            body = bytes(response.body) if response.body else b"{}"  # type: ignore[arg-type]
            result = json.loads(body)
            if result.get("ok") and method == "chat.delete":  # a second copy, removed
                self._deleted(str(args["channel"]), str(args["ts"]))
            elif result.get("ok") and method == "chat.postEphemeral":
                self.private.append(
                    Private(
                        time.time(),
                        str(args.get("text", "")),
                        user=args.get("user"),
                        channel=args.get("channel"),
                        thread_ts=args.get("thread_ts"),
                    )
                )
            elif result.get("ok"):
                self._posted(method, args, result)
        attempt["ok"] = getattr(response, "status", 0) == 200
        return response

    def _posted(self, method: str, args: dict[str, Any], result: dict[str, Any]) -> None:
        """A post, or a streamed reply closed (or replaced) as a recorded outcome: what
        the thread shows from then on. Previews and interrupted streams are not posts."""
        if method == "chat.postMessage":
            self.posts.append(
                Post(
                    str(args["channel"]),
                    str(result["ts"]),
                    args.get("thread_ts"),
                    args,
                    time.time(),
                )
            )
            return
        if method == "chat.update" and "metadata" not in args and is_decision(args):
            self._card_decided(args)
            return
        payload = (_object(args.get("metadata")) or {}).get("event_payload") or {}
        if not payload or payload.get("kind") in ("Preview", "Interrupted"):
            return
        message = self.api.messages.get((str(args["channel"]), str(args["ts"])))
        if message is None:
            return
        shown = {
            # What the thread shows: the streamed answer in full (its `text` is only the
            # notification's fallback, cut short for a long answer).
            "text": message.streamed or message.text,
            "blocks": message.blocks,
            "metadata": message.metadata,
        }
        post = Post(message.channel, message.ts, message.thread_ts, shown, time.time())
        for index, earlier in enumerate(self.posts):
            if (earlier.channel, earlier.ts) == (post.channel, post.ts):
                # One message (a stream closed, then replaced): the thread shows it once.
                post.deleted = earlier.deleted
                self.posts[index] = post
                return
        self.posts.append(post)

    def _card_decided(self, args: dict[str, Any]) -> None:
        """An approval request's card edited to say its decision: the decision's
        announcement, from then on (the request itself stays what it was posted as). An
        edit repeated says nothing new: the thread shows the card once."""
        message = self.api.messages.get((str(args["channel"]), str(args["ts"])))
        if message is None:
            return
        said = {"text": args.get("text"), "blocks": args.get("blocks")}
        post = Post(message.channel, message.ts, message.thread_ts, said, time.time())
        for index, earlier in enumerate(self.posts):
            if (earlier.channel, earlier.ts) == (post.channel, post.ts) and is_decision(
                earlier.args
            ):
                post.at, post.deleted = earlier.at, earlier.deleted
                self.posts[index] = post
                return
        self.posts.append(post)

    def _deleted(self, channel: str, ts: str) -> None:
        for post in self.posts:
            if (post.channel, post.ts) == (channel, ts):
                post.deleted = True


def _object(value: Any) -> dict[str, Any] | None:
    data = json.loads(value) if isinstance(value, str) and value else value
    return data if isinstance(data, dict) else None


async def _args(request: web.Request) -> dict[str, Any]:
    """Query, JSON or form arguments (slack_sdk uses all three); the body stays readable."""
    args: dict[str, Any] = dict(request.query)
    raw = await request.read()
    if not raw:
        return args
    if request.content_type == "application/json":
        body = json.loads(raw)
        if isinstance(body, dict):
            args.update(body)
    else:
        args.update(parse_qsl(raw.decode(), keep_blank_values=True))
    return args


@dataclass
class Delivery:
    kind: str  # event | command | click
    what: str
    attempts: list[dict[str, Any]] = field(default_factory=list)
    acked: bool = False
    body: str = ""  # what was sent (`Deliverer.again` sends it again)
    acked_at: float = 0.0  # when the first 2xx came


class Deliverer:
    """Slack's side of the HTTP conversation with the bot; the load balancer too."""

    def __init__(
        self, endpoints: Callable[[], list[str]], rng: random.Random, slack_url: str
    ) -> None:
        self.endpoints = endpoints
        self.rng = rng
        self.slack_url = slack_url
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=ACK_DEADLINE))
        self.deliveries: list[Delivery] = []
        self.pending = 0
        self._ack_waiters: list[asyncio.Future[str]] = []
        # Per replica URL: requests sent and not yet answered, requests sent in all, and
        # when one was last given up on (its handler may still run there).
        self.outstanding: dict[str, int] = {}
        self.sent: dict[str, int] = {}
        self.abandoned: dict[str, float] = {}

    async def next_ack(self, within: float) -> str | None:
        """The replica URL that acks the next request (any kind), or None."""
        waiter: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._ack_waiters.append(waiter)
        try:
            return await asyncio.wait_for(waiter, within)
        except TimeoutError:
            return None
        finally:
            if waiter in self._ack_waiters:
                self._ack_waiters.remove(waiter)

    async def close(self) -> None:
        await self.http.close()

    async def _post(self, body: str, content_type: str, extra: dict[str, str]) -> dict[str, Any]:
        live = self.endpoints()
        attempt: dict[str, Any] = {"at": time.time()}
        if not live:
            attempt["error"] = "no replica up"
            return attempt
        url = self.rng.choice(live)
        attempt["to"] = url
        headers = {
            "Content-Type": content_type,
            **requests.signed_headers(body, SECRET),
            **extra,
        }
        self.outstanding[url] = self.outstanding.get(url, 0) + 1
        self.sent[url] = self.sent.get(url, 0) + 1
        try:
            async with self.http.post(
                f"{url}/slack/events", data=body.encode(), headers=headers
            ) as response:
                await response.read()
                attempt["status"] = response.status
            if 200 <= response.status < 300:
                for waiter in self._ack_waiters:
                    if not waiter.done():
                        waiter.set_result(url)
        except (aiohttp.ClientError, TimeoutError) as exc:
            attempt["error"] = type(exc).__name__
            self.abandoned[url] = time.time()
        finally:
            self.outstanding[url] -= 1
        return attempt

    async def event(self, event: dict[str, Any], what: str, *, team: str = TEAM) -> Delivery:
        """An Events API delivery: retried up to 3 times, same event id, like Slack."""
        body = requests.event_callback(team, event, f"Ev{uuid.uuid4().hex[:12].upper()}")
        delivery = Delivery("event", what, body=body)
        self.deliveries.append(delivery)
        self.pending += 1
        try:
            for number in range(1 + len(EVENT_RETRY_PAUSES)):
                extra = {}
                if number:
                    extra = {"X-Slack-Retry-Num": str(number), "X-Slack-Retry-Reason": "timeout"}
                attempt = await self._post(body, "application/json", extra)
                delivery.attempts.append(attempt)
                if 200 <= attempt.get("status", 0) < 300:
                    delivery.acked, delivery.acked_at = True, time.time()
                    break
                if number < len(EVENT_RETRY_PAUSES):
                    await asyncio.sleep(EVENT_RETRY_PAUSES[number])
        finally:
            self.pending -= 1
        return delivery

    async def once(self, kind: str, body: str, what: str) -> Delivery:
        """A slash command or a click: Slack does not retry these."""
        delivery = Delivery(kind, what, body=body)
        self.deliveries.append(delivery)
        self.pending += 1
        try:
            attempt = await self._post(body, requests.FORM, {})
        finally:
            self.pending -= 1
        delivery.attempts.append(attempt)
        delivery.acked = 200 <= attempt.get("status", 0) < 300
        delivery.acked_at = time.time() if delivery.acked else 0.0
        return delivery

    async def again(self, delivery: Delivery) -> dict[str, Any]:
        """The same request sent once more, signed anew, as Slack redelivers one whose answer
        it did not see: an event with the same event id and the next `X-Slack-Retry-Num`; a
        click or a command as it was. Returns the attempt."""
        extra: dict[str, str] = {}
        kind = "application/json" if delivery.kind == "event" else requests.FORM
        if delivery.kind == "event":
            number = min(len(delivery.attempts), 3)
            extra = {"X-Slack-Retry-Num": str(number), "X-Slack-Retry-Reason": "http_timeout"}
        self.pending += 1
        try:
            attempt = await self._post(delivery.body, kind, extra)
        finally:
            self.pending -= 1
        attempt["again"] = True
        delivery.attempts.append(attempt)
        return attempt

    def response_url(self) -> tuple[str, str]:
        token = uuid.uuid4().hex[:10]
        return f"{self.slack_url}/respond/{token}", token
