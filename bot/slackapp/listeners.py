"""Bolt listeners: thin translations between Slack payloads and runtime operations."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import metrics
from bot.admin import AdminCommands
from bot.permalink import PermalinkError, parse_permalink, permalink
from bot.runtime import ConversationRuntime, Notice, NoticeKind, Refused
from bot.runtime.outcomes import Status as StatusReply
from bot.slackapp.blocks import (
    APPROVE,
    REJECT,
    RESUME,
    parse_button_value,
    paused_list_blocks,
)
from bot.slackapp.settings import SlackSettings
from storage import ConversationKey, Status

log = logging.getLogger(__name__)
MENTION = re.compile(r"<@[A-Z0-9]+>")
# Message subtypes that carry a user's text; every other subtype (edits, deletions, joins,
# bot messages) is ignored.
USER_SUBTYPES = {None, "file_share", "thread_broadcast"}
Respond = Callable[..., Awaitable[Any]]


class Listeners:
    def __init__(
        self, runtime: ConversationRuntime, settings: SlackSettings, admins: frozenset[str]
    ) -> None:
        self.runtime = runtime
        self.settings = settings
        self.admins = admins
        self.admin = AdminCommands(runtime, permalink)

    def register(self, app: AsyncApp) -> None:
        app.event("app_mention")(self.on_mention)
        app.event("message")(self.on_message)
        app.action(APPROVE)(self.on_decision)
        app.action(REJECT)(self.on_decision)
        app.action(RESUME)(self.on_resume_button)
        app.command(self.settings.resume_command)(self.on_resume_command)
        app.command(self.settings.admin_command)(self.on_admin_command)

    # -- messages -----------------------------------------------------------------------

    async def on_mention(
        self, body: dict[str, Any], event: dict[str, Any], client: AsyncWebClient
    ) -> None:
        await self._user_message(body, event, client, mentioned=True)

    async def on_message(
        self, body: dict[str, Any], event: dict[str, Any], client: AsyncWebClient
    ) -> None:
        if event.get("subtype") not in USER_SUBTYPES or event.get("bot_id"):
            return
        direct = event.get("channel_type") == "im"
        if not direct and "thread_ts" not in event:
            return  # a top-level channel message reaches us only as an app_mention
        await self._user_message(body, event, client, mentioned=direct)

    async def _user_message(
        self,
        body: dict[str, Any],
        event: dict[str, Any],
        client: AsyncWebClient,
        *,
        mentioned: bool,
    ) -> None:
        metrics.EVENTS.labels("message").inc()
        team = body.get("team_id") or event.get("team") or ""
        channel, ts, user = event["channel"], event["ts"], event.get("user", "")
        key = ConversationKey(team=team, channel=channel, thread_ts=event.get("thread_ts") or ts)
        if not mentioned and await self.runtime._call(self.runtime.store.get, key) is None:
            return  # a reply in a thread the bot is not part of
        text = MENTION.sub("", event.get("text") or "").strip()
        started = time.perf_counter()
        await _react(client, channel, ts, "eyes", add=True)
        outcomes = await self.runtime.handle_message(
            # One message, one id: a retried delivery and the app_mention + message pair
            # Slack sends for a mention in a thread are the same message.
            key,
            event_id=f"msg:{team}:{channel}:{ts}",
            user=user,
            text=text,
            ts=ts,
        )
        metrics.LATENCY.labels("message").observe(time.perf_counter() - started)
        await _react(client, channel, ts, "eyes", add=False)
        if any(isinstance(o, Notice) and o.kind is NoticeKind.QUEUED for o in outcomes):
            metrics.LEASE_CONFLICTS.inc()
            await _react(client, channel, ts, "hourglass_flowing_sand", add=True)

    # -- approvals ----------------------------------------------------------------------

    async def on_decision(
        self,
        ack: Callable[[], Awaitable[None]],
        body: dict[str, Any],
        respond: Respond,
        client: AsyncWebClient,
    ) -> None:
        await ack()
        metrics.EVENTS.labels("decision").inc()
        action = body["actions"][0]
        user = body["user"]["id"]
        try:
            key, call_id, version = parse_button_value(action["value"])
        except (ValueError, KeyError):
            await respond(
                text="That button is not one of mine.",
                response_type="ephemeral",
                replace_original=False,
            )
            return
        container = body.get("container", {})
        clicked = f"{container.get('channel_id', key.channel)}:{container.get('message_ts', '')}"
        outcomes = await self.runtime.decide(
            key,
            call_id=call_id,
            approve=action["action_id"] == APPROVE,
            user=user,
            checkpoint_version=version,
            request_message=clicked,
        )
        for outcome in outcomes:
            if isinstance(outcome, Refused):
                await respond(text=outcome.text, response_type="ephemeral", replace_original=False)

    # -- /resume ------------------------------------------------------------------------

    async def on_resume_command(
        self, ack: Callable[[], Awaitable[None]], body: dict[str, Any], respond: Respond
    ) -> None:
        await ack()
        metrics.EVENTS.labels("resume_command").inc()
        team, text = body["team_id"], (body.get("text") or "").strip()
        if not text:
            await respond(
                blocks=await self._paused_here(team, body["channel_id"]),
                text="Paused conversations",
            )
            return
        try:
            key = parse_permalink(text, team)
        except (PermalinkError, ValueError) as exc:
            await respond(text=str(exc))
            return
        await self._resume(key, respond)

    async def on_resume_button(
        self, ack: Callable[[], Awaitable[None]], body: dict[str, Any], respond: Respond
    ) -> None:
        await ack()
        await self._resume(ConversationKey.parse(body["actions"][0]["value"]), respond)

    async def _resume(self, key: ConversationKey, respond: Respond) -> None:
        metrics.RESUMES.labels("command").inc()
        outcomes = await self.runtime.resume(key)
        replies = [o.text for o in outcomes if isinstance(o, StatusReply | Refused)]
        text = " ".join(replies) or f"Resumed <{permalink(key)}|the conversation>; see the thread."
        await respond(text=text, response_type="ephemeral", replace_original=False)

    async def _paused_here(self, team: str, channel: str) -> list[dict[str, Any]]:
        records = await self.runtime.stale(timedelta(0))
        here = [
            r
            for r in records
            if r.key.team == team
            and r.key.channel == channel
            and r.status in (Status.AWAITING_APPROVAL, Status.INTERRUPTED)
        ]
        return paused_list_blocks(here, permalink)

    # -- /agent-admin -------------------------------------------------------------------

    async def on_admin_command(
        self, ack: Callable[[], Awaitable[None]], body: dict[str, Any], respond: Respond
    ) -> None:
        await ack()
        metrics.EVENTS.labels("admin_command").inc()
        user = body["user_id"]
        if user not in self.admins:
            log.warning("refused %s from non-admin %s", self.settings.admin_command, user)
            await respond(text="Only bot admins may use this command; nothing was changed.")
            return
        reply = await self.admin.run(body.get("text") or "", team=body["team_id"], by=user)
        await respond(text=reply.text[:3900])


async def _react(client: AsyncWebClient, channel: str, ts: str, name: str, *, add: bool) -> None:
    """Progress as a reaction; best effort: a failed reaction changes nothing else."""
    try:
        if add:
            await client.reactions_add(channel=channel, timestamp=ts, name=name)
        else:
            await client.reactions_remove(channel=channel, timestamp=ts, name=name)
    except SlackApiError as exc:
        log.debug("reaction %s on %s/%s: %s", name, channel, ts, exc.response.get("error"))
