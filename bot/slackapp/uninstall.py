"""A workspace (or an organisation) removes the app: `app_uninstalled`, or `tokens_revoked`
naming the bot. Its installation goes (so its requests are no longer authorized and nothing
is posted there: posts for it fail at once, permanently), its clients are forgotten, and
each of its conversations that could still run or resume is discarded, live runs included.

An uninstall applies to the installation it was sent for, once:

- it is keyed by Slack's event id: a redelivery (Slack sends an event again when it saw no
  answer within 3 s) is a duplicate and changes nothing, also after a reinstall;
- an installation made after the event (by its `event_time`) is not the one it was sent
  for: it stays, and so do its conversations (an uninstall delivered late, after the
  workspace installed the app again);
- what must hold before the answer is quick and done first: the installation is deleted
  and the removal recorded durably (`Removals.record`); discarding the
  conversations, slow for a busy workspace, comes after the answer, and only those begun
  before the removal was recorded. If the process dies before that is done, the recovery
  sweep of any replica finishes it (`bot.runtime.removals`)."""

from __future__ import annotations

import logging
import re
from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext

from bot import metrics
from bot.runtime import ConversationRuntime
from bot.slackapp.clients import SlackClients
from bot.slackapp.installations import StoredInstallations
from bot.slackapp.teams import SLACK_ID, conversation_enterprise

log = logging.getLogger(__name__)
EVENT_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
EVENT_TIME = re.compile(r"[0-9]{1,12}(\.[0-9]{1,8})?")


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

    async def uninstalled(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        metrics.EVENTS.labels("app_uninstalled").inc()
        await self._remove(body, event, context)

    async def tokens_revoked(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        metrics.EVENTS.labels("tokens_revoked").inc()
        tokens = event.get("tokens") or {}
        if tokens.get("bot"):  # without its bot token the app can do nothing there
            await self._remove(body, event, context)
            return
        users = [u for u in tokens.get("oauth") or [] if isinstance(u, str)]
        if self.installations is not None:  # only people's own tokens: the bot stays
            for user in users:
                await self.installations.async_delete_installation(
                    enterprise_id=context.enterprise_id, team_id=context.team_id, user_id=user
                )

    async def _remove(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        """Before the answer (the listener returns, then bolt answers: `process_before_
        response`): the installation deleted, the removal recorded; after it, the rest."""
        enterprise = conversation_enterprise(context, many_workspaces=self.many_workspaces)
        org_wide = bool(context.is_enterprise_install) and enterprise is not None
        team = None if org_wide else (body.get("team_id") or context.team_id)
        event_id = body.get("event_id")
        if team is not None and not SLACK_ID.fullmatch(str(team)):
            log.warning("ignored an uninstall event without a valid team id")
            return
        if not isinstance(event_id, str) or not EVENT_ID.fullmatch(event_id):
            log.warning("ignored an uninstall event without a valid event id")
            return
        where = f"{enterprise + '/' if enterprise else ''}{team or '(the whole organisation)'}"
        if await self.runtime.removals.known(event_id):
            log.info("%s: uninstall event %s received again; done already", where, event_id)
            return
        if self.installations is not None and not await self.installations.delete_unless_newer(
            enterprise_id=context.enterprise_id, team_id=team, than=sent_at(body, event)
        ):
            log.info(
                "%s: uninstall event %s is older than the installation: ignored", where, event_id
            )
            return
        self.clients.forget(team, enterprise)
        # Recorded now; its conversations are discarded after the answer, in a task.
        await self.runtime.removals.record(event_id, team=team, enterprise=enterprise)


def sent_at(body: dict[str, Any], event: dict[str, Any]) -> float | None:
    """When Slack says the event happened (epoch seconds), if it says so readably."""
    for value in (event.get("event_ts"), body.get("event_time")):
        if isinstance(value, int | str) and EVENT_TIME.fullmatch(str(value)):
            return float(value)
    return None
