"""Build the bolt `AsyncApp` and its Web API client."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.runtime import ConversationRuntime
from bot.slackapp.listeners import Listeners
from bot.slackapp.settings import SlackSettings


def web_client(settings: SlackSettings) -> AsyncWebClient:
    """slack_sdk's own retry handlers: 429 Retry-After, connection errors, 5xx."""
    return AsyncWebClient(
        token=settings.bot_token,
        base_url=settings.api_url,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=3),
            AsyncRateLimitErrorRetryHandler(max_retry_count=5),
            AsyncServerErrorRetryHandler(max_retry_count=2),
        ],
    )


def build_app(
    settings: SlackSettings,
    runtime: ConversationRuntime,
    client: AsyncWebClient,
    admins: frozenset[str],
) -> AsyncApp:
    app = AsyncApp(
        client=client,
        signing_secret=settings.signing_secret,
        # Socket Mode requests arrive over an authenticated websocket, unsigned.
        request_verification_enabled=not settings.socket_mode,
        process_before_response=False,  # ack at once, work in the background
    )
    Listeners(runtime, settings, admins).register(app)
    return app
