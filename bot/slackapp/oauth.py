"""Installs in many workspaces: bolt's OAuth flow (`GET /slack/install`,
`GET /slack/oauth_redirect`) over this project's storage, and bolt's authorization of each
request by its workspace's installation.

Every Web API call, `oauth.v2.access` and the token rotation's included, goes through the
app's client, so to `SLACK_API_URL`; the install link points at Slack's authorize page
beside it (`SlackSettings.install_authorize_url`). Failures show bolt's plain pages (or a
plain sentence), never a stack trace; secrets are never logged."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.authorization.async_authorize import AsyncInstallationStoreAuthorize
from slack_bolt.oauth.async_oauth_flow import AsyncOAuthFlow
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient

from bot.slackapp.authorization import InstalledOrUnavailable
from bot.slackapp.clients import InstalledWorkspaces
from bot.slackapp.installations import StoredInstallations
from bot.slackapp.oauth_state import SignedStates
from bot.slackapp.settings import SlackSettings
from storage import Store
from storage.calls import StorageCalls

log = logging.getLogger(__name__)
# What the app asks for when installed; slack-app-manifest.yaml asks for the same (a test
# checks both against the methods and events the code uses).
BOT_SCOPES = (
    "app_mentions:read",
    "assistant:write",
    "channels:history",
    "chat:write",
    "commands",
    "files:read",
    "groups:history",
    "im:history",
    "mpim:history",
    "reactions:write",
    "users:read",
)
FAILED = "The installation could not be completed. Please try again."
STATE_SECONDS = 600  # how long an install link (its state, and bolt's cookie) is good for


@dataclass
class Installs:
    """What serving many workspaces needs: where installations are kept, the OAuth flow's
    settings, bolt's authorization of requests, and each workspace's client."""

    installations: StoredInstallations
    oauth: AsyncOAuthSettings
    authorize: InstalledOrUnavailable
    clients: InstalledWorkspaces


def installs(
    settings: SlackSettings, store: Store, calls: StorageCalls, client: AsyncWebClient
) -> Installs:
    """`client`: the app's client without a token (its URL and retry handlers are used)."""
    assert settings.client_id and settings.client_secret, "many workspaces need the client"
    secret = settings.client_secret.get_secret_value()
    installations = StoredInstallations(store, calls)
    oauth = AsyncOAuthSettings(
        client_id=settings.client_id,
        client_secret=secret,
        scopes=list(BOT_SCOPES),
        user_scopes=[],
        installation_store=installations,
        installation_store_bot_only=True,  # the bot keeps bot tokens only
        token_rotation_expiration_minutes=settings.token_rotation_minutes,
        # Signed, so that the install page writes nothing (`oauth_state`).
        state_store=SignedStates(secret, store, calls, expiration_seconds=STATE_SECONDS),
        state_expiration_seconds=STATE_SECONDS,
        authorization_url=settings.install_authorize_url,
        success_url=settings.install_success_url,
        logger=log,
    )
    # bolt's own authorize would rotate tokens through a client of its own, at slack.com:
    # this one uses the app's client, and keeps each token's auth.test once.
    authorize = InstalledOrUnavailable(
        AsyncInstallationStoreAuthorize(
            logger=log,
            installation_store=installations,
            client_id=settings.client_id,
            client_secret=secret,
            token_rotation_expiration_minutes=settings.token_rotation_minutes,
            bot_only=True,
            cache_enabled=True,
            client=client,
        ),
        installations,
    )
    return Installs(
        installations, oauth, authorize, workspace_clients(settings, installations, client)
    )


def workspace_clients(
    settings: SlackSettings, installations: StoredInstallations, client: AsyncWebClient
) -> InstalledWorkspaces:
    """Each workspace's client from its installation (rotating its token when due); also
    what the admin CLI posts notices with."""
    assert settings.client_id and settings.client_secret, "many workspaces need the client"
    rotator = AsyncTokenRotator(
        client_id=settings.client_id,
        client_secret=settings.client_secret.get_secret_value(),
        client=client,
    )
    return InstalledWorkspaces(
        installations, client, rotator, rotation_minutes=settings.token_rotation_minutes
    )


def install_routes(flow: AsyncOAuthFlow) -> list[web.RouteDef]:
    """bolt's install page and redirect, at its default paths."""
    return [
        web.get(flow.install_path, _served(flow.handle_installation, "the install page failed")),
        web.get(flow.redirect_uri_path, _served(flow.handle_callback, "an installation failed")),
    ]


def _served(
    handle: Callable[[AsyncBoltRequest], Awaitable[BoltResponse]], failure: str
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """One of bolt's OAuth pages on aiohttp; a failure is logged as `failure`, and the
    person sees a plain sentence."""

    async def serve(request: web.Request) -> web.StreamResponse:
        try:
            response = await handle(await to_bolt_request(request))
        except Exception:
            log.exception(failure)
            return web.Response(status=500, text=FAILED)
        return await to_aiohttp_response(response)

    return serve
