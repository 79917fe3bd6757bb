"""A small, recording implementation of the Slack Web API methods the bot uses, served by
aiohttp on loopback. Tests read `calls` and `messages`; local mode builds its page on it.

Answers like Slack: form or JSON bodies, `{"ok": true, ...}` or `{"ok": false, "error": ...}`,
and 429 with `Retry-After` for methods told to be rate limited; a call told to be held
(`hold`) stays in flight, applied and answered only when released. Given a `token`, it also
checks it like Slack does (`Authorization: Bearer` or a `token` argument): `not_authed`
without one, `invalid_auth` for another. Workspaces installed through its OAuth side
(`oauth`) get tokens of their own, which it checks too (`token_revoked` after an
uninstall), answering each call for its token's workspace."""

from __future__ import annotations

import asyncio
import contextvars
import hmac
import itertools
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from bot.standin.container import ContainerMethods
from bot.standin.oauth import Grant, OAuthApp, OAuthMethods, Team, basic_auth
from bot.standin.people_files import PeopleAndFiles
from bot.standin.records import Call, Message, StatusChange, json_list, json_object
from bot.standin.streams import MARKDOWN_LIMIT, STATUS_TIMEOUT, AgentMethods, refused

__all__ = ["BOT_ID", "BOT_USER", "TEAM", "Call", "Message", "SlackWebApi", "StatusChange"]

BOT_USER = "UBOT"
BOT_ID = "BBOT"
TEAM = "T0LOCAL"
_PEER: contextvars.ContextVar[str | None] = contextvars.ContextVar("peer", default=None)


class SlackWebApi(AgentMethods, ContainerMethods, OAuthMethods, PeopleAndFiles):
    def __init__(
        self, team: str = TEAM, bot_user: str = BOT_USER, *, token: str | None = None
    ) -> None:
        PeopleAndFiles.__init__(self)
        ContainerMethods.__init__(self)
        self.team = team
        self.token = token
        self.teams: dict[str, Team] = {team: Team(team, "Local")}
        self.tokens: dict[str, Grant] = {}
        self.revoked: set[str] = set()
        self.oauth_app: OAuthApp | None = None
        self.codes: dict[str, Grant] = {}
        self.refresh_tokens: dict[str, Grant] = {}
        self._caller: Grant | None = None  # whose token the call being answered carries
        self.bot_user = bot_user
        self.calls: list[Call] = []
        self.messages: dict[tuple[str, str], Message] = {}
        self.responses: list[dict[str, Any]] = []  # what arrived at response_url endpoints
        self.socket_url: str | None = None
        self.rate_limited: dict[str, int] = {}  # method -> how many more 429s to answer
        self.failures: dict[str, list[str | int]] = {}  # method -> next answers: status/error
        self.channel_errors: dict[
            str, str
        ] = {}  # channel -> error for chat.*, assistant.*, agents.*
        self.method_errors: dict[str, str] = {}  # method -> error for every call (a feature off)
        self.holds: dict[str, asyncio.Event] = {}  # method -> its next call waits for it
        self._landing: set[asyncio.Task[dict[str, Any]]] = set()  # held calls, applied later
        self.streaming_refused: set[str] = set()  # channels where chat.startStream is refused
        self.statuses: dict[tuple[str, str], list[StatusChange]] = {}  # per thread, in order
        self.status_timeout = STATUS_TIMEOUT
        self.listeners: list[Callable[[Call], None]] = []
        self.changed = asyncio.Condition()
        self._clock = itertools.count(1)

    # -- serving ------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/api/{method}", self._api),
            web.get("/api/{method}", self._api),
            web.post("/respond/{token}", self._respond),
            web.get("/oauth/v2/authorize", self.authorize_page),
            *self.file_routes(),
        ]

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        peer = request.transport.get_extra_info("peername") if request.transport else None
        _PEER.set(f"{peer[0]}:{peer[1]}" if peer else None)  # this request's task only
        args = await _read_args(request)
        if method == "oauth.v2.access":  # the app's client id and secret, not a token
            return web.json_response(self._oauth_access(request, args))
        auth_error, grant = self._auth_error(request, args)
        if auth_error:
            self._record(Call(f"{method}:{auth_error}", args))
            return web.json_response(refused(auth_error))
        channel = args.get("channel") or args.get("channel_id")
        if grant is not None and channel and not self.may_use(grant, str(channel)):
            self._record(Call(f"{method}:channel_not_found", args, team=grant.team))
            return web.json_response(refused("channel_not_found"))
        if self.rate_limited.get(method, 0) > 0:
            self.rate_limited[method] -= 1
            self._record(Call(f"{method}:429", args))
            return web.json_response(
                {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"}
            )
        failure = self._failure(method, args)
        if failure is not None:
            self._record(Call(f"{method}:{failure}", args))
            await self._notify()
            if isinstance(failure, int):
                return web.json_response({"ok": False, "error": "fatal_error"}, status=failure)
            return web.json_response({"ok": False, "error": failure})
        held = self.holds.pop(method, None)
        if held is not None:
            return web.json_response(await self._in_flight(held, method, args, grant))
        result = self._apply(method, args, grant)
        await self._notify()
        return web.json_response(result)

    def _apply(self, method: str, args: dict[str, Any], grant: Grant | None) -> dict[str, Any]:
        """Run the method and record the call."""
        call = Call(method, args, team=grant.team if grant else None)
        handler = getattr(self, "m_" + method.replace(".", "_"), None)
        self._caller = grant
        if handler is None:
            result: dict[str, Any] = {"ok": False, "error": "unknown_method"}
        else:
            try:
                result = handler(args)
            except KeyError as missing:
                result = {"ok": False, "error": "invalid_arguments", "missing": str(missing)}
            except (ValueError, TypeError):  # e.g. `blocks` that are not a JSON list
                result = refused("invalid_arguments")
        self._caller = None
        self._record(call)
        return result

    async def _in_flight(
        self, release: asyncio.Event, method: str, args: dict[str, Any], grant: Grant | None
    ) -> dict[str, Any]:
        """A held call (`hold`): recorded as `<method>:held` on arrival, applied (and
        recorded as `<method>`) once released, even when its caller is gone by then."""
        self._record(Call(f"{method}:held", args, team=grant.team if grant else None))
        await self._notify()

        async def land() -> dict[str, Any]:
            await release.wait()
            result = self._apply(method, args, grant)
            await self._notify()
            return result

        task = asyncio.create_task(land())
        self._landing.add(task)
        task.add_done_callback(self._landing.discard)
        return await asyncio.shield(task)  # a caller that disconnects does not stop it

    def hold(self, method: str) -> asyncio.Event:
        """Hold the next call of `method` in flight, the way Slack may take a while with a
        request it has: neither applied nor answered until the returned event is set."""
        release = asyncio.Event()
        self.holds[method] = release
        return release

    def _failure(self, method: str, args: dict[str, Any]) -> str | int | None:
        """A fault a test asked for: the next answers of a method (an HTTP status or a Slack
        error), a permanent error for a method, or for every post (and status) in a channel."""
        queued = self.failures.get(method)
        if queued:
            return queued.pop(0)
        if method in self.method_errors:
            return self.method_errors[method]
        channel = args.get("channel") or args.get("channel_id")
        if method.startswith(("chat.", "assistant.", "agents.")) and channel in self.channel_errors:
            return self.channel_errors[str(channel)]
        return None

    def _auth_error(
        self, request: web.Request, args: dict[str, Any]
    ) -> tuple[str | None, Grant | None]:
        """An error for a call with a wrong token (only once there are tokens to check),
        else what its token grants (None: the start-up token, or no check)."""
        if self.token is None and not self.tokens:
            return None, None
        header = request.headers.get("Authorization", "")
        given = header.removeprefix("Bearer ").strip() if header else str(args.get("token", ""))
        if not given:
            return "not_authed", None
        if self.token is not None and hmac.compare_digest(given.encode(), self.token.encode()):
            return None, None
        if given in self.revoked:
            return "token_revoked", None
        grant = self.grant_for(given)
        if grant is None:
            return ("token_expired" if given in self.tokens else "invalid_auth"), None
        return None, grant

    def _oauth_access(self, request: web.Request, args: dict[str, Any]) -> dict[str, Any]:
        basic = basic_auth(request.headers.get("Authorization", ""))
        if basic is not None:
            args["_basic"] = basic
        result = self.m_oauth_v2_access(args)
        recorded = {k: v for k, v in args.items() if k not in ("_basic", "client_secret")}
        self._record(Call("oauth.v2.access", recorded))
        return result

    async def _respond(self, request: web.Request) -> web.Response:
        payload = await request.json()
        payload["_token"] = request.match_info["token"]
        self.responses.append(payload)
        self._record(Call("response_url", payload))
        await self._notify()
        return web.Response(text="ok")

    def _record(self, call: Call) -> None:
        call.peer = call.peer or _PEER.get()
        self.calls.append(call)
        for listener in self.listeners:
            listener(call)

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def wait_for(self, predicate: Callable[[], Any], within: float = 30) -> Any:
        """Wait until `predicate()` is truthy (re-checked after every call) and return it."""

        async def until() -> Any:
            async with self.changed:
                while not (result := predicate()):
                    await self.changed.wait()
                return result

        return await asyncio.wait_for(until(), within)

    def next_ts(self) -> str:
        return f"{int(time.time())}.{next(self._clock):06d}"

    # -- queries for tests and the page -------------------------------------------------

    def called(self, method: str) -> list[Call]:
        return [call for call in self.calls if call.method == method]

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        found = [
            m
            for m in self.messages.values()
            if m.channel == channel and (m.ts == thread_ts or m.thread_ts == thread_ts)
        ]
        return sorted(found, key=lambda m: float(m.ts))

    def bot_replies(
        self, channel: str, thread_ts: str, *, streaming: bool = False
    ) -> list[Message]:
        """The bot's posts everyone in the thread sees (not its ephemeral messages); replies
        still being streamed only with `streaming`."""
        return [
            m
            for m in self.thread(channel, thread_ts)
            if m.user == self.bot_user and not m.ephemeral_to and (streaming or not m.streaming)
        ]

    def add_user_message(
        self,
        channel: str,
        user: str,
        text: str,
        thread_ts: str | None = None,
        files: list[dict[str, Any]] | None = None,
    ) -> Message:
        message = Message(
            channel=channel, ts=self.next_ts(), text=text, user=user, thread_ts=thread_ts
        )
        message.files = files or None
        self.messages[(channel, message.ts)] = message
        return message

    # -- methods ------------------------------------------------------------------------

    def m_auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        grant = self._caller
        if grant is not None:  # an installed workspace's (or organisation's) token
            team = self.teams[grant.team]
            enterprise = team.id if team.org else team.enterprise
            return {
                "ok": True,
                "url": team.url,
                "team": team.name,
                "user": "bot",
                "team_id": None if team.org else team.id,
                "user_id": self.bot_user,
                "bot_id": BOT_ID,
                "enterprise_id": enterprise,
                "is_enterprise_install": team.org,
            }
        return {
            "ok": True,
            "url": "https://local.slack.com/",
            "team": "Local",
            "user": "bot",
            "team_id": self.team,
            "user_id": self.bot_user,
            "bot_id": BOT_ID,
        }

    def m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        text = args.get("text") or ""
        markdown_text = args.get("markdown_text") or None
        blocks = json_list(args.get("blocks"))
        if not text and not markdown_text and not blocks:
            return refused("no_text")
        if len(text) > 40_000 or len(markdown_text or "") > MARKDOWN_LIMIT:
            return refused("msg_too_long")
        message = Message(
            channel=args["channel"],
            ts=self.next_ts(),
            text=text,
            user=self.bot_user,
            thread_ts=args.get("thread_ts"),
            blocks=blocks,
            metadata=json_object(args.get("metadata")),
            markdown_text=markdown_text,
        )
        self.messages[(message.channel, message.ts)] = message
        self.replied(message.channel, message.thread_ts, "chat.postMessage")
        return {
            "ok": True,
            "channel": message.channel,
            "ts": message.ts,
            "message": {"text": message.shown_text(), "ts": message.ts, "user": self.bot_user},
        }

    def m_conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        """A thread's messages, oldest first (pages of `limit`; metadata on request; those
        before `latest`, or at it too when `inclusive`)."""
        channel, thread_ts = args["channel"], args["ts"]
        found = [m for m in self.thread(channel, thread_ts) if not m.ephemeral_to]
        if not found:
            return {"ok": False, "error": "thread_not_found"}
        if args.get("latest"):
            inclusive = str(args.get("inclusive", "")).lower() in ("1", "true")
            latest = float(args["latest"])
            found = [
                m for m in found if float(m.ts) < latest or (inclusive and float(m.ts) == latest)
            ]
        start = int(args.get("cursor") or 0)
        limit = int(args.get("limit") or 100)
        page = found[start : start + limit]
        with_metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        messages = []
        for m in page:
            item: dict[str, Any] = {
                "type": "message",
                "ts": m.ts,
                "text": m.shown_text(),
                "user": m.user,
            }
            if m.thread_ts:
                item["thread_ts"] = m.thread_ts
            if m.user == self.bot_user:
                item["bot_id"] = BOT_ID
            if m.blocks:
                item["blocks"] = m.blocks
            if m.files:
                item["files"] = m.files
            if with_metadata and m.metadata:
                item["metadata"] = m.metadata
            messages.append(item)
        more = start + limit < len(found)
        return {
            "ok": True,
            "messages": messages,
            "has_more": more,
            "response_metadata": {"next_cursor": str(start + limit) if more else ""},
        }

    def m_chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        """New content replaces the old, a stream's included; metadata only when given (Slack
        keeps it otherwise)."""
        message = self.messages.get((args["channel"], args["ts"]))
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        blocks = json_list(args["blocks"]) if "blocks" in args else message.blocks
        metadata = json_object(args.get("metadata"))
        message.text = args.get("text") or message.text
        if args.get("markdown_text"):
            message.markdown_text, message.text = args["markdown_text"], ""
        elif args.get("text") or "blocks" in args:
            message.markdown_text = None
        message.blocks = blocks
        if metadata is not None:
            message.metadata = metadata
        message.streamed, message.tasks, message.task_at, message.plan = "", [], {}, None
        message.streaming = False
        return {"ok": True, "channel": message.channel, "ts": message.ts}

    def m_chat_delete(self, args: dict[str, Any]) -> dict[str, Any]:
        """Only the bot's own messages, like a bot token."""
        message = self.messages.get((args["channel"], args["ts"]))
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        if message.user != self.bot_user:
            return {"ok": False, "error": "cant_delete_message"}
        del self.messages[(message.channel, message.ts)]
        return {"ok": True, "channel": message.channel, "ts": message.ts}

    def m_chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        message = Message(
            channel=args["channel"],
            ts=self.next_ts(),
            text=args.get("text") or "",
            user=self.bot_user,
            thread_ts=args.get("thread_ts"),
            blocks=json_list(args.get("blocks")),
            ephemeral_to=args.get("user"),
        )
        self.messages[(message.channel, message.ts)] = message
        return {"ok": True, "message_ts": message.ts}

    def m_reactions_add(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self.messages.get((args["channel"], args["timestamp"]))
        if message is not None:
            if args["name"] in message.reactions:
                return {"ok": False, "error": "already_reacted"}
            message.reactions.add(args["name"])
        return {"ok": True}

    def m_reactions_remove(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self.messages.get((args["channel"], args["timestamp"]))
        if message is not None:
            if args["name"] not in message.reactions:
                return {"ok": False, "error": "no_reaction"}
            message.reactions.discard(args["name"])
        return {"ok": True}

    def m_apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        if self.socket_url is None:
            return {"ok": False, "error": "socket_mode_not_available"}
        return {"ok": True, "url": self.socket_url}


async def _read_args(request: web.Request) -> dict[str, Any]:
    """Arguments arrive as a query string, a form, or JSON (slack_sdk uses all three). A
    body read before (by a middleware in front: aiohttp keeps what it read) still counts."""
    args: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        body = await request.json()
        if isinstance(body, dict):
            args.update(body)
    elif request.body_exists:
        form = await request.post()
        args.update({name: str(value) for name, value in form.items()})
    return args
