"""A workspace (or an organisation) removes the app: `app_uninstalled`, or `tokens_revoked`
naming the bot. Its installation goes (so its requests are no longer authorized and nothing
is posted there: posts for it fail at once, permanently), its clients are forgotten, and
each of its conversations that could still run or resume is discarded, live runs included.

All of it happens before the event is acknowledged: if the process dies halfway, Slack
delivers the event again and the rest is done then (each step is safe to repeat)."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext

from bot import metrics
from bot.runtime import ConversationRuntime
from bot.slackapp.clients import SlackClients
from bot.slackapp.installations import StoredInstallations
from bot.slackapp.teams import SLACK_ID, conversation_enterprise

log = logging.getLogger(__name__)


class Uninstalls:
    def __init__(
        self,
        runtime: ConversationRuntime,
        clients: SlackClients,
        installations: StoredInstallations | None,
        *,
        many_workspaces: bool,
    ) -> None:
        self.runtime = runtime
        self.clients = clients
        self.installations = installations  # None with one workspace: nothing is kept
        self.many_workspaces = many_workspaces

    def register(self, app: AsyncApp) -> None:
        app.event("app_uninstalled")(self.uninstalled)
        app.event("tokens_revoked")(self.tokens_revoked)

    async def uninstalled(self, body: dict[str, Any], context: AsyncBoltContext) -> None:
        metrics.EVENTS.labels("app_uninstalled").inc()
        await self._remove(body, context)

    async def tokens_revoked(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        metrics.EVENTS.labels("tokens_revoked").inc()
        tokens = event.get("tokens") or {}
        if tokens.get("bot"):  # without its bot token the app can do nothing there
            await self._remove(body, context)
            return
        users = [u for u in tokens.get("oauth") or [] if isinstance(u, str)]
        if self.installations is not None:  # only people's own tokens: the bot stays
            for user in users:
                await self.installations.async_delete_installation(
                    enterprise_id=context.enterprise_id, team_id=context.team_id, user_id=user
                )

    async def _remove(self, body: dict[str, Any], context: AsyncBoltContext) -> None:
        enterprise = conversation_enterprise(context, many_workspaces=self.many_workspaces)
        org_wide = bool(context.is_enterprise_install) and enterprise is not None
        team = None if org_wide else (body.get("team_id") or context.team_id)
        if team is not None and not SLACK_ID.fullmatch(str(team)):
            log.warning("ignored an uninstall event without a valid team id")
            return
        if self.installations is not None:
            await self.installations.async_delete_all(
                enterprise_id=context.enterprise_id, team_id=team
            )
        self.clients.forget(team, enterprise)
        discarded = await self.runtime.discard_team(team, enterprise=enterprise)
        where = f"{enterprise + '/' if enterprise else ''}{team or '(the whole organisation)'}"
        log.info("removed from %s: %d conversations discarded", where, len(discarded))
