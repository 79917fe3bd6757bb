"""Bolt listeners: thin translations between Slack payloads and runtime operations.

Each listener has two halves (bolt's `ack` and `lazy` functions, with the app processing
before it responds): the first keeps what must not be lost (a message, a decision) with one
durable write and only then lets bolt acknowledge the request; if keeping fails the request
gets a 500 and Slack delivers it again. The second half, after the acknowledgement, does the
work: serving the thread, answering a command. A message, the busiest request, needs nothing
of bolt's for its second half: its keep hands the thread to the runtime to serve in a task
of its own (`serve_soon`), which spares bolt's copy of the whole request for a lazy
function."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from bot import metrics
from bot.admin import AdminCommands
from bot.permalink import PermalinkError, linker, parse_permalink
from bot.runtime import EXPIRED, NEUTRAL, ConversationRuntime, Kept, Refused, StatusReply, Viewing
from bot.slackapp.agent_blocks import FEEDBACK, STOP, parse_feedback
from bot.slackapp.blocks import APPROVE, REJECT, RESUME, parse_button_value, paused_list_blocks
from bot.slackapp.conversation_source import shared_files
from bot.slackapp.home import ON_HOME, HomeTab
from bot.slackapp.live import LiveThreads
from bot.slackapp.settings import SlackSettings
from bot.slackapp.teams import conversation_enterprise, workspace_url
from bot.slackapp.viewing_events import from_entities
from storage import ConversationKey, PersonKey

log = logging.getLogger(__name__)
MENTION = re.compile(r"<@[A-Z0-9]+>")
SLACK_ID = re.compile(r"[A-Z0-9]{2,32}")  # team, enterprise, channel and user ids
SLACK_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,8}")  # message timestamps
# Message subtypes that carry a user's text; every other subtype (edits, deletions, joins,
# bot messages) is ignored.
USER_SUBTYPES = {None, "file_share", "thread_broadcast"}
LIST_FAILED = (
    "I couldn't list the paused conversations just now. Run `/resume` with the thread's link "
    "instead (its ⋮ menu: Copy link)."
)
Respond = Callable[..., Awaitable[Any]]
Ack = Callable[..., Awaitable[None]]


class Listeners:
    def __init__(
        self,
        runtime: ConversationRuntime,
        settings: SlackSettings,
        admins: frozenset[str],
        workspace_url: str = "https://slack.com/",
        *,
        live: LiveThreads | None = None,
        home: HomeTab | None = None,
    ) -> None:
        self.runtime = runtime
        self.settings = settings
        self.admins = admins
        self.workspace_url = workspace_url  # thread links where a request names none
        self.live = live  # titles the sessions of new conversations
        self.home = home  # answers clicks made on the Home tab

    def register(self, app: AsyncApp) -> None:
        app.event("app_mention")(self.keep_mention)
        app.event("message")(self.keep_reply)
        app.action(APPROVE)(ack=self.keep_decision, lazy=[self.serve_decision])
        app.action(REJECT)(ack=self.keep_decision, lazy=[self.serve_decision])
        app.action(RESUME)(ack=self.ack_at_once, lazy=[self.resume_button])
        app.action(FEEDBACK)(ack=self.keep_feedback, lazy=[self.answer_feedback])
        app.action(STOP)(ack=self.keep_stop, lazy=[self.serve_stop])
        app.command(self.settings.resume_command)(ack=self.ack_at_once, lazy=[self.resume_command])
        app.command(self.settings.admin_command)(ack=self.ack_at_once, lazy=[self.admin_command])

    async def ack_at_once(self, ack: Ack) -> None:
        await ack()

    # -- messages -----------------------------------------------------------------------

    async def keep_mention(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        await self._keep_message(body, event, context, create=True)

    async def keep_reply(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        if event.get("subtype") not in USER_SUBTYPES or event.get("bot_id"):
            return
        direct = event.get("channel_type") == "im"
        if not direct and "thread_ts" not in event:
            return  # a top-level channel message reaches us only as an app_mention
        # In a thread, only one the bot is part of takes the message (no read needed).
        await self._keep_message(body, event, context, create=direct)

    async def _keep_message(
        self,
        body: dict[str, Any],
        event: dict[str, Any],
        context: AsyncBoltContext,
        *,
        create: bool,
    ) -> None:
        metrics.EVENTS.labels("message").inc()
        team = body.get("team_id") or event.get("team")
        channel, ts = event.get("channel"), event.get("ts")
        thread_ts = event.get("thread_ts") or ts
        user, raw_text = event.get("user") or "", event.get("text") or ""
        if not (
            _matches(SLACK_ID, team, channel)
            and _matches(SLACK_TS, ts, thread_ts)
            and isinstance(user, str)
            and isinstance(raw_text, str)
        ):
            log.warning("ignored a message event without valid ids")
            return
        key = ConversationKey(
            team=team, channel=channel, thread_ts=thread_ts, enterprise=self._enterprise(context)
        )
        text = MENTION.sub("", raw_text).strip()
        direct = event.get("channel_type") == "im" and SLACK_ID.fullmatch(user) is not None
        # One message, one id: a retried delivery and the app_mention + message pair Slack
        # sends for a mention in a thread are the same message.
        kept = await self.runtime.intake.keep_message(
            key,
            event_id=f"msg:{team}:{channel}:{ts}",
            user=user,
            text=text,
            ts=ts,
            create=create,
            take=True,  # the same write takes the thread when free: served without a read
            files=shared_files(event),
            viewing=await self._viewing(event, key, user) if direct else None,
        )
        if kept is not Kept.KEPT:
            return
        opened_by = None  # who opened a new conversation: one of their recent ones (on Home)
        if create and self.runtime.opens_conversation(key):
            if SLACK_ID.fullmatch(user):
                opened_by = PersonKey.of(key, user)
            if self.live is not None:
                self.live.name(key, text)  # the session's title: its first request
        self.runtime.serve_soon(key, opened_by=opened_by)  # after the ack, in a task of its own

    async def _viewing(
        self, event: dict[str, Any], key: ConversationKey, user: str
    ) -> Viewing | None:
        """What the author of a message in the agent's container views: as the message
        says (the current experience may fold it in), else as they were last seen."""
        now = datetime.now(UTC)
        told = from_entities(event.get("app_context"), now)
        if told is not None:
            return told
        return await self.runtime.people.viewing_for(PersonKey.of(key, user), key.thread_ts)

    # -- approvals ----------------------------------------------------------------------

    async def keep_decision(
        self, ack: Ack, body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        await ack()
        metrics.EVENTS.labels("decision").inc()
        container = body.get("container") or {}
        context["from_home"] = container.get("type") == "view"
        try:
            action = body["actions"][0]
            user = str(body["user"]["id"])
            key, call_id, version = parse_button_value(action["value"])
        except (ValueError, KeyError, TypeError, IndexError, ValidationError):
            context["refusal"] = "That button is not one of mine."
            return
        clicked = f"{container.get('channel_id', key.channel)}:{container.get('message_ts', '')}"
        kept = await self.runtime.intake.keep_decision(
            key,
            event_id=f"action:{key.team}:{call_id}:{user}:{_click_id(body, action)}",
            call_id=call_id,
            approve=action.get("action_id") == APPROVE,
            user=user,
            checkpoint_version=version,
            request_message=clicked if container.get("message_ts") else None,
            # A click on the Home tab has no response_url: it is answered on the tab.
            reply_to=body.get("response_url") or (ON_HOME if context["from_home"] else None),
            take=True,
        )
        context["kept"] = kept.value
        context["kept_key"] = str(key)

    async def serve_decision(
        self,
        body: dict[str, Any],
        context: AsyncBoltContext,
        respond: Respond | None,
        client: AsyncWebClient,
    ) -> None:
        refusal = context.get("refusal")
        if context.get("kept") == Kept.NOT_OURS.value:
            refusal = EXPIRED
        user = str((body.get("user") or {}).get("id", ""))
        if refusal and context.get("from_home"):
            await self._home_note(context, client, user, refusal)
            return
        if refusal and respond is not None:
            await respond(text=refusal, response_type="ephemeral", replace_original=False)
            return
        if context.get("kept") == Kept.KEPT.value:
            # Refusals and late clicks are answered through the click's response_url (or
            # on the Home tab it came from) by whichever replica serves the thread.
            await self.runtime.serve(ConversationKey.parse(context["kept_key"]))

    async def _home_note(
        self, context: AsyncBoltContext, client: AsyncWebClient, user: str, note: str
    ) -> None:
        """The Home tab a click came from, published again: what stands now, and why."""
        person = self.home.person(context, user) if self.home is not None else None
        if self.home is not None and person is not None:
            await self.home.publish(person, client, note)

    # -- feedback and Stop ---------------------------------------------------------------

    async def keep_feedback(
        self, ack: Ack, body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        """A verdict on an answer, recorded before the click is acknowledged."""
        metrics.EVENTS.labels("feedback").inc()
        try:
            action = body["actions"][0]
            user = str(body["user"]["id"])
            key, answer, verdict = parse_feedback(str(action["value"]))
        except (ValueError, KeyError, TypeError, IndexError, ValidationError):
            context["refusal"] = "That button is not one of mine."
            await ack()
            return
        tally = await self.runtime.queries.record_feedback(key, answer, user, verdict)
        await ack()
        if tally is None:
            context["refusal"] = "That conversation has expired; your feedback was not kept."
        else:
            metrics.FEEDBACK.labels(verdict.value).inc()

    async def answer_feedback(self, context: AsyncBoltContext, respond: Respond) -> None:
        if context.get("refusal"):
            await respond(
                text=context["refusal"], response_type="ephemeral", replace_original=False
            )

    async def keep_stop(
        self, ack: Ack, body: dict[str, Any], respond: Respond, context: AsyncBoltContext
    ) -> None:
        """The Stop control: the stop is kept (or refused) and the person answered before
        Slack is acknowledged, so that a process lost after the acknowledgement loses no
        stop and no answer (chaos 180096); a paused run is stopped after it."""
        metrics.EVENTS.labels("stop").inc()
        await ack()  # sent when this returns (`process_before_response`)
        try:
            action = body["actions"][0]
            key = ConversationKey.parse(str(action["value"]))
            user = str(body["user"]["id"])
            click = _click_id(body, action)
        except (KeyError, IndexError, TypeError, ValueError, ValidationError):
            click = ""
        if not click:
            await respond(text="That button is not one of mine.", replace_original=False)
            return
        stopping = await self.runtime.stops.keep_stop(
            key,
            user,
            event_id=f"action:{key.team}:stop:{user}:{click}",  # a click sent again: one stop
            reply_to=body.get("response_url"),
        )
        if stopping.serve:
            context["stop_serves"] = str(key)
        try:  # the Stop control is this person's alone: the answer replaces it
            await respond(text=stopping.text, response_type="ephemeral", replace_original=True)
        except Exception:  # the stop itself is kept: it is applied all the same
            log.warning("%s: could not answer a stop", key, exc_info=True)

    async def serve_stop(self, context: AsyncBoltContext) -> None:
        if key := context.get("stop_serves"):
            await self.runtime.serve(ConversationKey.parse(key))

    # -- /resume ------------------------------------------------------------------------

    async def resume_command(
        self, body: dict[str, Any], respond: Respond, context: AsyncBoltContext
    ) -> None:
        metrics.EVENTS.labels("resume_command").inc()
        team, text = str(body.get("team_id", "")), str(body.get("text") or "").strip()
        user = str(body.get("user_id", ""))
        enterprise, link = self._enterprise(context), self._link(context)
        if not text:
            try:
                paused = await self.runtime.queries.paused_in(
                    team, str(body.get("channel_id", "")), user, enterprise=enterprise
                )
            except Exception:  # e.g. a table that lacks the index yet (an upgrade half done)
                log.exception("listing the paused conversations of a channel failed")
                await respond(text=LIST_FAILED)
                return
            await respond(blocks=paused_list_blocks(paused, link), text="Paused conversations")
            return
        try:
            key = parse_permalink(text, team, enterprise)
        except PermalinkError as exc:  # its words are plain; the link is not echoed back
            await respond(text=str(exc))
            return
        trigger = str(body.get("trigger_id") or "")
        event_id = f"command:{team}:{trigger}" if trigger else None
        text = await self._resume(key, user, link, body.get("response_url"), event_id)
        await respond(text=text, response_type="ephemeral", replace_original=False)

    async def resume_button(
        self, body: dict[str, Any], respond: Respond, context: AsyncBoltContext
    ) -> None:
        """Resume, clicked in `/resume`'s list: the answer replaces that list, with the list
        as it stands now under it (the thread resumed, or whatever the click found, is
        listed as it is now), so that no list stays offering what has become stale. Slack
        takes a response_url's answer for 30 minutes, 5 times: this uses it at most twice
        (queued, then the answer)."""
        try:
            action = body["actions"][0]
            key = ConversationKey.parse(str(action["value"]))
            user = str(body["user"]["id"])
        except (KeyError, IndexError, TypeError, ValueError, ValidationError):
            await respond(text="That button is not one of mine.", replace_original=False)
            return
        click = _click_id(body, action)
        event_id = f"action:{key.team}:resume:{user}:{click}" if click else None
        link = self._link(context)
        text = await self._resume(key, user, link, body.get("response_url"), event_id, replace=True)
        try:
            paused = await self.runtime.queries.paused_in(
                key.team, key.channel, user, enterprise=key.enterprise
            )
        except Exception:  # the answer is what matters; the list can be asked for again
            log.warning("%s: listing the channel's paused conversations failed", key, exc_info=True)
            paused = None
        blocks = (
            paused_list_blocks(paused, link, said=text)
            if paused is not None
            else [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
        )
        response = await respond(
            text=text, blocks=blocks, response_type="ephemeral", replace_original=True
        )
        status = getattr(response, "status_code", 200)
        if status >= 400:  # e.g. past Slack's 30 minutes: the thread shows what happened
            log.info("%s: the list clicked could not be replaced (HTTP %s)", key, status)

    async def _resume(
        self,
        key: ConversationKey,
        user: str,
        link: Callable[[ConversationKey], str],
        response_url: object,
        event_id: str | None,
        *,
        replace: bool = False,
    ) -> str:
        """What to answer `/resume` of `key`. `event_id`: Slack's ids for the request, which
        keys what it keeps (a probe of an expired thread), as every kept Slack request is
        keyed. `replace`: a queued notice replaces the message the request came from."""
        metrics.RESUMES.labels("command").inc()
        # Told there at once when it must wait for a run slot; answered by the caller.
        reply_to = response_url if isinstance(response_url, str) and response_url else None
        outcomes = await self.runtime.scheduler.resume(
            key, user=user, reply_to=reply_to, replace=replace, event_id=event_id
        )
        replies = [o.text for o in outcomes if isinstance(o, StatusReply | Refused)]
        thread = f"<{link(key)}|the thread>"
        text = " ".join(replies) or "Resumed the conversation."
        if any(isinstance(o, StatusReply) and o.text != NEUTRAL for o in outcomes):
            text += f" Go to {thread}."
        elif not replies:
            text = f"Resumed {thread}."
        return text

    # -- /agent-admin -------------------------------------------------------------------

    async def admin_command(
        self, body: dict[str, Any], respond: Respond, context: AsyncBoltContext
    ) -> None:
        metrics.EVENTS.labels("admin_command").inc()
        user = str(body.get("user_id", ""))
        if user not in self.admins:
            log.warning("refused %s from non-admin %s", self.settings.admin_command, user)
            await respond(text="Only bot admins may use this command; nothing was changed.")
            return
        admin = AdminCommands(self.runtime, self._link(context))
        reply = await admin.run(
            str(body.get("text") or ""),
            team=str(body.get("team_id", "")),
            by=user,
            enterprise=self._enterprise(context),
        )
        await respond(text=reply.text[:3900])

    # -- the request's workspace --------------------------------------------------------

    def _enterprise(self, context: AsyncBoltContext) -> str | None:
        return conversation_enterprise(context, many_workspaces=self.settings.many_workspaces)

    def _link(self, context: AsyncBoltContext) -> Callable[[ConversationKey], str]:
        return linker(workspace_url(context, self.workspace_url))


def _click_id(body: dict[str, Any], action: dict[str, Any]) -> str:
    """What tells one click from another (and the same click, delivered again, from none):
    Slack's trigger id, else the action's time."""
    return str(body.get("trigger_id") or action.get("action_ts") or "")


def _matches(pattern: re.Pattern[str], *values: object) -> bool:
    return all(isinstance(v, str) and pattern.fullmatch(v) for v in values)
