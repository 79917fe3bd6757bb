"""Build the bolt `AsyncApp` and its Web API client: for one workspace (a bot token, bolt
authorizing from the start-up `auth.test`), or for many (bolt's OAuth flow, each request
authorized by its workspace's installation; see `oauth`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from slack_bolt import BoltResponse
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.logger.messages import (
    warning_client_prioritized_and_token_skipped,
    warning_token_skipped,
)
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.runtime import ConversationRuntime
from bot.slackapp.clients import OneWorkspace, for_bolt
from bot.slackapp.container import ContainerListeners
from bot.slackapp.home import HomeTab
from bot.slackapp.listeners import Listeners
from bot.slackapp.live import LiveThreads
from bot.slackapp.oauth import Installs
from bot.slackapp.settings import SlackSettings
from bot.slackapp.uninstall import Uninstalls
from bot.suggestions import load_suggestions
from storage import StorageError

log = logging.getLogger(__name__)
AsyncAuthorize = Callable[..., Awaitable[AuthorizeResult]]
WEB_API_TIMEOUT = 30  # seconds, slack_sdk's default for one call


def web_api_session() -> aiohttp.ClientSession:
    """One HTTP session (its connection pool) for every Web API client of the process:
    without it slack_sdk opens a new session, so a new connection and TLS handshake, for
    every call. Made in the running loop; whoever makes it closes it."""
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WEB_API_TIMEOUT))


class _ClientTokenWarning(logging.Filter):
    """bolt reads SLACK_BOT_TOKEN from the environment even when given `client=`, then warns
    that this token is unused (and again when given `authorize=`); it is the token our
    client and our `authorize` carry, so the warnings are noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in (
            warning_client_prioritized_and_token_skipped(),
            warning_token_skipped(),
        )


class _UnhandledRequestLine(logging.Filter):
    """bolt's warning for a request no listener takes (an event type the app does not
    handle, say) adds a listener to paste in, over several lines: anyone who may sign a
    request could fill the log with them. One line is enough, and it is kept short."""

    LIMIT = 300

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Unhandled request"):
            line = message.split("\n", 1)[0]
            record.msg = line if len(line) <= self.LIMIT else f"{line[: self.LIMIT]}..."
            record.args = None
        return True


_CLIENT_TOKEN_WARNING = _ClientTokenWarning()
_UNHANDLED_REQUEST_LINE = _UnhandledRequestLine()


def web_client(
    settings: SlackSettings, session: aiohttp.ClientSession | None = None
) -> AsyncWebClient:
    """slack_sdk's own retry handlers: 429 Retry-After, connection errors (a kept-alive
    connection the server closed, too), 5xx. With many workspaces it has no token: each
    workspace's client copies it (`clients`), session included."""
    return AsyncWebClient(
        token=settings.bot_token,
        base_url=settings.api_url,
        timeout=WEB_API_TIMEOUT,
        session=session,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=3),
            AsyncRateLimitErrorRetryHandler(max_retry_count=5),
            AsyncServerErrorRetryHandler(max_retry_count=2),
        ],
    )


def single_team(identity: AsyncSlackResponse, token: str) -> AsyncAuthorize:
    """bolt's authorization for one workspace, from the `auth.test` the server made at start:
    bolt's own would call `auth.test` again on the first requests, once per request that
    arrives before the first answer (50 calls for a first burst of 50 events)."""
    result = AuthorizeResult.from_auth_test_response(bot_token=token, auth_test_response=identity)

    async def authorize(**_: Any) -> AuthorizeResult:
        return result

    return authorize


def build_app(
    settings: SlackSettings,
    runtime: ConversationRuntime,
    client: AsyncWebClient,
    admins: frozenset[str],
    workspace_url: str = "https://slack.com/",
    identity: AsyncSlackResponse | None = None,
    installs: Installs | None = None,
    *,
    live: LiveThreads | None = None,
    home: HomeTab | None = None,
) -> AsyncApp:
    """`installs` for many workspaces; otherwise `identity` is the bot token's auth.test.
    `live` shows the runs' work (it titles new conversations' sessions); `home` is the App
    Home tab (made here when not given)."""
    bolt_log = logging.getLogger("slack_bolt.AsyncApp")
    bolt_log.addFilter(_CLIENT_TOKEN_WARNING)
    bolt_log.addFilter(_UNHANDLED_REQUEST_LINE)
    authorize: Any = installs.authorize if installs else None
    if identity is not None and settings.bot_token:
        authorize = single_team(identity, settings.bot_token)
    app = AsyncApp(
        client=for_bolt(client),
        authorize=authorize,
        oauth_settings=installs.oauth if installs else None,
        signing_secret=settings.signing_secret,
        # Socket Mode requests arrive over an authenticated websocket, unsigned.
        request_verification_enabled=not settings.socket_mode,
        # Each listener keeps what must not be lost before the request is acknowledged,
        # then works after it: in a lazy function, or a message in a task of the
        # runtime's (see `listeners`).
        process_before_response=True,
    )
    clients = installs.clients if installs else OneWorkspace(client)
    many = settings.many_workspaces
    home = home or HomeTab(runtime, clients, admins, many_workspaces=many)
    Listeners(runtime, settings, admins, workspace_url, live=live, home=home).register(app)
    suggestions = load_suggestions(runtime.settings.agent)
    ContainerListeners(runtime, home, suggestions, live, many_workspaces=many).register(app)
    home.register(app)
    Uninstalls(
        runtime,
        clients,
        installs.installations if installs else None,
        many_workspaces=installs is not None,
    ).register(app)
    app.error(on_error)
    return app


MALFORMED = (TypeError, LookupError, AttributeError, ValueError)


async def on_error(error: Exception, response: BoltResponse | None) -> BoltResponse:
    """A request of a shape bolt does not expect (signed, but not what Slack sends) gets a
    400 and a log line; anything else (e.g. storage unavailable while keeping a message) a
    500, so that Slack delivers it again."""
    if isinstance(error, MALFORMED) and not isinstance(error, StorageError):
        log.warning("refused a malformed request: %r", error)
        return BoltResponse(status=400, body="")
    log.error("request failed; Slack will retry it: %r", error, exc_info=error)
    return BoltResponse(status=500, body="")
