"""The agent's container, in both of Slack's agent experiences, and Slack's agent sessions.

The current one (manifest `agent_view`): opening the app's Messages tab (`app_home_opened`,
tab `messages`) greets a person with a short greeting and suggested prompts, once (kept
durably: `greet_once`); every message there is a thread root of its own and a conversation
like a channel thread (`listeners`); `app_context_changed` says what the person is viewing
beside the container, kept for their next message. The older one (`assistant_view`): a new
assistant thread (`assistant_thread_started`) gets the prompts, and what its person views
(`assistant_thread_context_changed` too) is kept for that thread. The Home tab
(`app_home_opened`, tab `home`) is `home`'s.

Slack's own stop control on a session (`agent_session_stopped`) becomes the durable stop
the Stop control and the reply `stop` make (kept before the event is acknowledged), honoured
for the same people; refused ones are told privately, and a session left `processing` with
nothing running is closed."""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from datetime import UTC, datetime
from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from bot import metrics
from bot.runtime import ConversationRuntime, Stopping, Viewing
from bot.slackapp.home import HomeTab
from bot.slackapp.live import LiveThreads
from bot.slackapp.live_thread import ERRORS, error_of
from bot.slackapp.teams import SLACK_ID, conversation_enterprise
from bot.slackapp.viewing_events import SLACK_TS, from_assistant_thread, from_entities
from bot.suggestions import Suggestions
from storage import ConversationKey, PersonKey

log = logging.getLogger(__name__)
EVENT_ID = re.compile(r"Ev[A-Za-z0-9]{2,62}")  # Slack's id of an event delivery


@dataclasses.dataclass(eq=False)
class ContainerListeners:
    runtime: ConversationRuntime
    home: HomeTab
    suggestions: Suggestions
    live: LiveThreads | None
    _: dataclasses.KW_ONLY
    many_workspaces: bool

    def register(self, app: AsyncApp) -> None:
        app.event("app_home_opened")(ack=self.nothing_to_keep, lazy=[self.home_opened])
        app.event("app_context_changed")(self.context_changed)
        app.event("assistant_thread_started")(ack=self.thread_started, lazy=[self.offer_prompts])
        app.event("assistant_thread_context_changed")(self.thread_context_changed)
        app.event("agent_session_stopped")(ack=self.keep_session_stop, lazy=[self.session_stopped])

    async def nothing_to_keep(self) -> None:
        return

    # -- opening the container and the Home tab -----------------------------------------

    async def home_opened(
        self, event: dict[str, Any], context: AsyncBoltContext, client: AsyncWebClient
    ) -> None:
        metrics.EVENTS.labels("app_home_opened").inc()
        person = self.home.person(context, str(event.get("user", "")))
        if person is None:
            return
        if event.get("tab") == "home":
            await self.home.opened(person, client)
        elif event.get("tab") == "messages" and SLACK_ID.fullmatch(str(event.get("channel"))):
            await self._greet(person, str(event["channel"]), client)

    async def _greet(self, person: PersonKey, channel: str, client: AsyncWebClient) -> None:
        """Once per person: the greeting, then the prompts under it (set for the channel's
        latest message, as the current experience wants). A greeting that could not be
        posted is tried again at their next opening; prompts that could not be set are not
        (the greeting stands)."""
        if not await self.runtime.people.greet_once(person):
            return
        try:
            await client.chat_postMessage(channel=channel, text=self.suggestions.greeting)
        except ERRORS as exc:
            log.warning("%s: not greeted: %s", person, error_of(exc))
            await self.runtime.people.greeting_failed(person)
            return
        await self._prompts(client, channel, None)

    async def _prompts(self, client: AsyncWebClient, channel: str, thread_ts: str | None) -> None:
        try:
            await client.assistant_threads_setSuggestedPrompts(
                channel_id=channel,
                thread_ts=thread_ts,
                title=self.suggestions.greeting if thread_ts else "Try one of these",
                prompts=[prompt.as_slack() for prompt in self.suggestions.prompts],
            )
        except ERRORS as exc:
            log.info("%s: no suggested prompts: %s", channel, error_of(exc))

    # -- what the person views ----------------------------------------------------------

    async def context_changed(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        """Kept before the event is acknowledged: their next message goes with it."""
        metrics.EVENTS.labels("app_context_changed").inc()
        person = self.home.person(context, _viewer(body, event))
        if person is None:
            return
        at = _moment(body, event)
        viewing = from_entities(event.get("context"), at) or Viewing(at=at)  # {}: nothing
        await self.runtime.people.note_viewing(person, viewing)

    async def thread_started(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        metrics.EVENTS.labels("assistant_thread_started").inc()
        await self._thread_context(body, event, context)

    async def offer_prompts(self, event: dict[str, Any], client: AsyncWebClient) -> None:
        thread = event.get("assistant_thread") or {}
        channel, thread_ts = thread.get("channel_id"), thread.get("thread_ts")
        if SLACK_ID.fullmatch(str(channel)) and SLACK_TS.fullmatch(str(thread_ts)):
            await self._prompts(client, str(channel), str(thread_ts))

    async def thread_context_changed(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        metrics.EVENTS.labels("assistant_thread_context_changed").inc()
        await self._thread_context(body, event, context)

    async def _thread_context(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        thread = event.get("assistant_thread")
        parsed = from_assistant_thread(thread, _moment(body, event))
        user = str((thread or {}).get("user_id", "")) if isinstance(thread, dict) else ""
        person = self.home.person(context, user)
        if parsed is None or person is None:
            return
        thread_ts, viewing = parsed
        await self.runtime.people.note_viewing(
            person, viewing or Viewing(at=_moment(body, event), thread_ts=thread_ts)
        )

    # -- Slack's stop -------------------------------------------------------------------

    async def keep_session_stop(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        metrics.EVENTS.labels("agent_session_stopped").inc()
        user, channel, thread_ts = event.get("user"), event.get("channel"), event.get("thread_ts")
        team = body.get("team_id") or context.team_id
        event_id = body.get("event_id")
        if not (
            SLACK_ID.fullmatch(str(user))
            and SLACK_ID.fullmatch(str(team))
            and SLACK_ID.fullmatch(str(channel))
            and SLACK_TS.fullmatch(str(thread_ts))
            and EVENT_ID.fullmatch(str(event_id))
        ):
            log.warning("ignored an agent_session_stopped event without valid ids")
            return
        enterprise = conversation_enterprise(context, many_workspaces=self.many_workspaces)
        key = ConversationKey(
            team=str(team), channel=str(channel), thread_ts=str(thread_ts), enterprise=enterprise
        )
        # Keyed by Slack's event id: a delivery Slack repeats (its first ack not seen) is a
        # duplicate, never a stop of whatever runs in the thread by then.
        stopping = await self.runtime.stops.keep_stop(key, str(user), event_id=f"event:{event_id}")
        context["stop_key"], context["stop_user"] = str(key), str(user)
        context["stopping"] = dataclasses.asdict(stopping)  # copied for the lazy half

    async def session_stopped(self, context: AsyncBoltContext, client: AsyncWebClient) -> None:
        if context.get("stopping") is None:
            return
        stopping = Stopping(**context["stopping"])
        key = ConversationKey.parse(context["stop_key"])
        if stopping.duplicate:
            return  # its first delivery was answered
        if stopping.serve:
            await self.runtime.serve(key)  # a paused run: stopped now, the thread told
        elif stopping.refused:
            try:
                await client.chat_postEphemeral(
                    channel=key.channel,
                    user=context["stop_user"],
                    thread_ts=key.thread_ts,
                    text=f"{stopping.text} Nothing was stopped.",
                )
            except ERRORS as exc:
                log.info("%s: the refused stop was not told: %s", key, error_of(exc))
        elif not stopping.accepted and self.live is not None:
            await self.live.close_session(key)  # nothing runs there: not `processing`


def _viewer(body: dict[str, Any], event: dict[str, Any]) -> str:
    """Whose view changed: the event's `user`, else the person its authorization is for."""
    if isinstance(event.get("user"), str):
        return str(event["user"])
    for authorization in body.get("authorizations") or []:
        if isinstance(authorization, dict) and not authorization.get("is_bot"):
            return str(authorization.get("user_id", ""))
    return ""


def _moment(body: dict[str, Any], event: dict[str, Any]) -> datetime:
    """When Slack says it happened (reports are kept newest-wins), else now."""
    for value in (event.get("event_ts"), body.get("event_time")):
        try:
            return datetime.fromtimestamp(float(str(value)), tz=UTC)
        except (TypeError, ValueError, OverflowError, OSError):
            continue
    return datetime.fromtimestamp(time.time(), tz=UTC)
