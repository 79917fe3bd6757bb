"""The Web API client for a conversation's workspace: every outgoing call (posts, streams,
status, reactions, read-backs, the recovery sweep's deliveries, admin notices) asks for the
client of its conversation's team (and enterprise).

With one workspace (`SLACK_BOT_TOKEN`) that is always the one client. With many (OAuth) it
is a client carrying the workspace's bot token from its installation (`installations`),
rotated first when the installation has a refresh token and its token expires soon; org-wide
installs serve every workspace of their organisation. Clients are kept a short while
(`CACHE_SECONDS`), so a busy thread does not read its installation for every call; a
workspace that uninstalled the app is forgotten at once on the replica that got the event
(`forget`), and within `CACHE_SECONDS` on the others. A workspace without an installation
raises `TeamNotInstalled`: nothing is sent.

The bot's own ids in a workspace (`identity`: its user id, to tell its messages in a thread
from people's, and its bot id, to find its own posts) come from one `auth.test` per
workspace, kept as long as the workspace is."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.oauth.installation_store import Bot
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.slackapp.installations import StoredInstallations
from storage import ConversationKey

log = logging.getLogger(__name__)
CACHE_SECONDS = 30.0
NOT_INSTALLED = "not_installed"  # the delivery error recorded for such a conversation


class TeamNotInstalled(Exception):
    """The app is not installed in that workspace (never was, uninstalled, or revoked)."""

    def __init__(self, team: str, enterprise: str | None) -> None:
        super().__init__(f"not installed in {enterprise + '/' if enterprise else ''}{team}")
        self.team = team
        self.enterprise = enterprise


@dataclass(frozen=True)
class BotIdentity:
    user_id: str | None
    bot_id: str | None


def own_ids(auth_test: AsyncSlackResponse | None) -> BotIdentity | None:
    """The bot's ids in an `auth.test` answer."""
    if auth_test is None:
        return None
    return BotIdentity(user_id=auth_test.get("user_id"), bot_id=auth_test.get("bot_id"))


async def ask_identity(client: AsyncWebClient) -> BotIdentity | None:
    """The bot's ids from `auth.test`; None when Slack did not answer (asked again later)."""
    try:
        return own_ids(await client.auth_test())
    except SlackApiError as exc:
        log.warning("auth.test failed: %s", exc.response.get("error"))
        return None


class SlackClients(Protocol):
    async def for_key(self, key: ConversationKey) -> AsyncWebClient:
        """The client for the conversation's workspace; raises `TeamNotInstalled`."""
        ...

    async def identity(self, key: ConversationKey) -> BotIdentity | None:
        """The bot's own ids in the conversation's workspace (asked once); None when Slack
        cannot say now. Raises `TeamNotInstalled`."""
        ...

    def forget(self, team: str | None, enterprise: str | None) -> None:
        """Drop what is known of a workspace (all of `enterprise`'s when `team` is None)."""
        ...


class OneWorkspace:
    """Single-workspace mode: the one client, whatever the key says."""

    def __init__(self, client: AsyncWebClient, identity: BotIdentity | None = None) -> None:
        self.client = client
        self.known = identity  # e.g. from the start-up auth.test

    async def for_key(self, key: ConversationKey) -> AsyncWebClient:
        return self.client

    async def identity(self, key: ConversationKey) -> BotIdentity | None:
        if self.known is None:
            self.known = await ask_identity(self.client)
        return self.known

    def forget(self, team: str | None, enterprise: str | None) -> None:
        return None


def as_clients(source: AsyncWebClient | SlackClients) -> SlackClients:
    """Callers that have one client pass it; the rest pass their `SlackClients`."""
    return OneWorkspace(source) if isinstance(source, AsyncWebClient) else source


def with_token(base: AsyncWebClient, token: str) -> AsyncWebClient:
    """A client like `base` (its Web API URL, timeout, retry handlers, HTTP session) with
    `token`."""
    return _like(base, token, base.session)


def for_bolt(base: AsyncWebClient) -> AsyncWebClient:
    """`base` without its HTTP session, for bolt: bolt deep-copies each request's context,
    its client included, for the lazy listeners, and an aiohttp session cannot be copied.
    (Our listeners make their calls with our clients, not bolt's.)"""
    return _like(base, base.token, None)


def _like(
    base: AsyncWebClient, token: str | None, session: aiohttp.ClientSession | None
) -> AsyncWebClient:
    return AsyncWebClient(
        token=token,
        base_url=base.base_url,
        timeout=base.timeout,
        session=session,
        ssl=base.ssl,
        proxy=base.proxy,
        headers=dict(base.headers),
        logger=base.logger,
        retry_handlers=list(base.retry_handlers),
    )


@dataclass
class _Known:
    client: AsyncWebClient
    until: float  # monotonic time after which the installation is read again


class InstalledWorkspaces:
    """Many workspaces: each conversation's client from its workspace's installation."""

    def __init__(
        self,
        installations: StoredInstallations,
        base: AsyncWebClient,
        rotator: AsyncTokenRotator | None = None,
        *,
        rotation_minutes: int = 120,
        cache_seconds: float = CACHE_SECONDS,
    ) -> None:
        self.installations = installations
        self.base = base  # no token: its URL and retry handlers are copied
        self.rotator = rotator
        self.rotation_minutes = rotation_minutes
        self.cache_seconds = cache_seconds
        self._known: dict[tuple[str | None, str], _Known] = {}
        self._locks: dict[tuple[str | None, str], asyncio.Lock] = {}
        self._identities: dict[tuple[str | None, str], BotIdentity] = {}

    async def for_key(self, key: ConversationKey) -> AsyncWebClient:
        return await self.for_team(key.team, key.enterprise)

    async def for_team(self, team: str, enterprise: str | None) -> AsyncWebClient:
        ids = (enterprise, team)
        known = self._known.get(ids)
        if known is not None and time.monotonic() < known.until:
            return known.client
        async with self._locks.setdefault(ids, asyncio.Lock()):  # one lookup per workspace
            known = self._known.get(ids)
            if known is not None and time.monotonic() < known.until:
                return known.client
            bot = await self._bot(team, enterprise)
            client = with_token(self.base, bot.bot_token)
            until = time.monotonic() + self.cache_seconds
            if bot.bot_token_expires_at is not None:  # read again before it needs rotating
                left = bot.bot_token_expires_at - time.time() - self.rotation_minutes * 60
                until = min(until, time.monotonic() + left)
            self._known[ids] = _Known(client, until)
            return client

    async def _bot(self, team: str, enterprise: str | None) -> Bot:
        bot = await self.installations.async_find_bot(enterprise_id=enterprise, team_id=team)
        if bot is None and enterprise is not None:  # an org-wide install serves the workspace
            bot = await self.installations.async_find_bot(
                enterprise_id=enterprise, team_id=None, is_enterprise_install=True
            )
        if bot is None:
            raise TeamNotInstalled(team, enterprise)
        if bot.bot_refresh_token and self.rotator is not None:
            rotated = await self.rotator.perform_bot_token_rotation(
                bot=bot, minutes_before_expiration=self.rotation_minutes
            )
            if rotated is not None:
                await self.installations.async_save_bot(rotated)
                log.info("rotated the bot token of %s", enterprise or team)
                bot = rotated
        return bot

    async def identity(self, key: ConversationKey) -> BotIdentity | None:
        ids = (key.enterprise, key.team)
        if ids not in self._identities:
            found = await ask_identity(await self.for_key(key))
            if found is None:
                return None
            self._identities[ids] = found
        return self._identities[ids]

    def forget(self, team: str | None, enterprise: str | None) -> None:
        for known in (self._known, self._identities):
            for ids in list(known):
                if ids[0] == enterprise and (team is None or ids[1] == team):
                    del known[ids]
