"""What a person does on the page, put in the outbox as Slack would send it to the app: a
message (a mention, a reply, a DM, with files), a slash command, a click on a button."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from bot.standin.ephemeral import OnlyYou, element
from bot.standin.local_workspaces import Place, Places
from bot.standin.outbox import Outbox
from bot.standin.requests import app_mention
from bot.standin.requests import message as message_event
from bot.standin.slack_api import Message, SlackWebApi

MENTION = "@agent"


class PageActions:
    def __init__(self, api: SlackWebApi, places: Places, only_you: OnlyYou, outbox: Outbox) -> None:
        self.api = api
        self.places = places
        self.only_you = only_you
        self.outbox = outbox

    def post_message(
        self,
        user: str,
        text: str,
        thread_ts: str | None,
        place: Place | None = None,
        files: Sequence[tuple[str, str, bytes]] = (),
    ) -> Message:
        """`files` (name, type, bytes) are shared with the message, as Slack shares them."""
        place = place or self.places.all[0]
        direct = place.channel.startswith("D")  # the person's DM with the app
        mentioned = MENTION in text and not direct  # Slack sends no app_mention in a DM
        text = text.replace(MENTION, f"<@{self.api.bot_user}>")
        shared = [self.api.add_file(name, mimetype, data) for name, mimetype, data in files]
        message = self.api.add_user_message(place.channel, user, text, thread_ts, shared)
        said = {"user": user, "text": text, "ts": message.ts, "channel": place.channel}
        events = []  # as Slack sends them: a mention in a thread is both events
        if mentioned:
            mention = app_mention(**said, thread_ts=thread_ts, team=place.team)
            events.append(mention | ({"files": shared} if shared else {}))
        if thread_ts or not mentioned:
            extra: dict[str, Any] = {"subtype": "file_share", "files": shared} if shared else {}
            kind = "im" if direct else "channel"
            extra |= {"channel_type": kind}
            events.append(message_event(**said, thread_ts=thread_ts, team=place.team, **extra))
        for event in events:
            self.outbox.enqueue(
                {
                    "kind": "event",
                    "team": place.team,
                    "user": user,
                    "ts": message.ts,
                    "thread_ts": thread_ts,
                    "event": event,
                    "event_id": f"Ev{uuid.uuid4().hex[:12]}",
                    "channel": place.channel,
                }
            )
        return message

    def command(
        self,
        user: str,
        command: str,
        text: str,
        thread_ts: str | None,
        place: Place | None = None,
    ) -> None:
        """A slash command; its answers show where it was typed (Slack does not tell the
        app the thread, but shows the person the answer there)."""
        place = place or self.places.all[0]
        where = {"channel": place.channel}
        self.outbox.enqueue(
            {
                "kind": "command",
                "team": place.team,
                "channel": place.channel,
                "user": user,
                "thread_ts": thread_ts,
                "command": command,
                "text": text,
                "response_url": self.only_you.response_url(user, thread_ts, where),
            }
        )

    def click(
        self,
        user: str,
        ts: str,
        action_id: str,
        value: str,
        thread_ts: str | None,
        label: str,
        *,
        ephemeral: dict[str, Any] | None = None,
        place: Place | None = None,
    ) -> None:
        """A button clicked on message `ts`, or on one of this person's `ephemeral` ones;
        sent as Slack would, naming the clicked element's block and type."""
        place = place or self.places.all[0]
        if ephemeral is not None:
            ts, blocks, origin = (
                ephemeral["ts"],
                ephemeral["blocks"],
                {"ephemeral": ephemeral["id"]},
            )
        else:
            message = self.api.messages.get((place.channel, ts))
            blocks, origin = (message.blocks if message else None), {"ts": ts}
        origin["channel"] = place.channel
        block_id, kind = element(blocks, action_id)
        if kind == "feedback_buttons":
            self.only_you.choose(user, ts, action_id, value)
        self.outbox.enqueue(
            {
                "kind": "click",
                "team": place.team,
                "channel": place.channel,
                "user": user,
                "thread_ts": thread_ts,
                "ts": ts,
                "ephemeral": ephemeral is not None,
                "action_id": action_id,
                "action_type": kind,
                "block_id": block_id,
                "value": value,
                "label": label,
                "response_url": self.only_you.response_url(user, thread_ts, origin),
            }
        )
