"""What local mode shows one person only: "only visible to you" messages (chat.postEphemeral,
and answers to a `response_url`), where each `response_url`'s answer goes, and which feedback
button each person clicked. Like Slack, an answer with `replace_original` or
`delete_original` changes the message the click came from, an ephemeral one included."""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

from bot.standin.records import Call, Message, json_list
from bot.standin.slack_api import SlackWebApi
from bot.standin.view import CHANNEL, Chosen, blocks_view

EPHEMERAL_KEPT = 30  # per person
RESPONDERS_KEPT = 200  # response_urls still answered (Slack's live for 30 minutes)


def _flag(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def element(blocks: list[dict[str, Any]] | None, action_id: str) -> tuple[str, str]:
    """The block id and element type of the element with `action_id` (a block without a
    block_id gets one by its place, as Slack makes one up)."""
    for index, block in enumerate(blocks or []):
        elements = [*block.get("elements", []), block.get("accessory") or {}]
        for found in elements:
            if isinstance(found, dict) and found.get("action_id") == action_id:
                return str(block.get("block_id") or f"b{index}"), str(found.get("type", "button"))
    return "b", "button"


class OnlyYou:
    def __init__(self, api: SlackWebApi, base_url: str) -> None:
        self.api = api
        self.base_url = base_url
        # response_url token -> where its answer shows: {"user", "thread_ts"}, its
        # "channel" (local mode's general channel when absent) and the clicked message:
        # "ephemeral" (its id) or "ts"
        self.responders: dict[str, dict[str, Any]] = {}
        # {"id", "ts", "user", "channel", "thread_ts", "text", "blocks"}, oldest first
        self.ephemerals: list[dict[str, Any]] = []
        self.chosen: dict[str, Chosen] = {}  # user -> message ts -> action_id -> value
        # Ids the page names; not reused after a restart (a saved response_url may name one).
        self._ids = itertools.count(int(time.time() * 1000))

    def response_url(
        self, user: str, thread_ts: str | None, origin: dict[str, Any] | None = None
    ) -> str:
        token = uuid.uuid4().hex
        self.responders[token] = {"user": user, "thread_ts": thread_ts, **(origin or {})}
        for old in list(self.responders)[:-RESPONDERS_KEPT]:
            del self.responders[old]
        return f"{self.base_url}/respond/{token}"

    def on_call(self, call: Call) -> None:
        """Answers for one person: to a response_url, or chat.postEphemeral."""
        if call.method == "response_url":
            place = self.responders.get(str(call.args.get("_token", "")))
            if place is not None and place["user"]:
                self.answer(place, call.args)
        elif call.method == "chat.postEphemeral":
            for key, message in list(self.api.messages.items()):
                if message.ephemeral_to:
                    del self.api.messages[key]
                    self.add(message)

    def add(self, message: Message) -> dict[str, Any]:
        assert message.ephemeral_to is not None
        thread_ts = message.thread_ts
        if thread_ts and (message.channel, thread_ts) not in self.api.messages:
            thread_ts = None
        shown = {
            "id": next(self._ids),
            "ts": message.ts,
            "user": message.ephemeral_to,
            "channel": message.channel,
            "thread_ts": thread_ts,
            "text": message.text,
            "blocks": message.blocks,
        }
        self.ephemerals.append(shown)
        mine = [e for e in self.ephemerals if e["user"] == message.ephemeral_to]
        for old in mine[:-EPHEMERAL_KEPT]:
            self.ephemerals.remove(old)
        return shown

    def answer(self, place: dict[str, Any], payload: dict[str, Any]) -> None:
        """A response_url's answer: changes the clicked message when it says so, else shows
        as a new message (in the channel, or to this person only)."""
        text = str(payload.get("text") or "")
        blocks = json_list(payload.get("blocks"))
        change = _flag(payload.get("delete_original")) or _flag(payload.get("replace_original"))
        if change and self._change_original(place, payload, text, blocks):
            return
        thread_ts = place.get("thread_ts")
        channel = str(place.get("channel") or CHANNEL)
        if payload.get("response_type") == "in_channel":
            if thread_ts and (channel, thread_ts) not in self.api.messages:
                thread_ts = None
            message = self.api.add_user_message(channel, self.api.bot_user, text, thread_ts)
            message.blocks = blocks
            return
        bot, ts = self.api.bot_user, self.api.next_ts()
        self.add(Message(channel, ts, text, bot, thread_ts, blocks, ephemeral_to=place["user"]))

    def _change_original(
        self,
        place: dict[str, Any],
        payload: dict[str, Any],
        text: str,
        blocks: list[dict[str, Any]] | None,
    ) -> bool:
        """Replace or delete the clicked message; False when there is none to change."""
        delete = _flag(payload.get("delete_original"))
        if place.get("ephemeral") is not None:
            found = self.find(place["user"], place["ephemeral"])
            if found is None:
                return delete  # already gone: a replacement shows as a new message
            if delete:
                self.ephemerals.remove(found)
            else:
                found.update(text=text, blocks=blocks)
            return True
        channel = str(place.get("channel") or CHANNEL)
        message = self.api.messages.get((channel, str(place.get("ts") or "")))
        if message is None:
            return delete
        if delete:
            del self.api.messages[(channel, message.ts)]
        else:
            message.text, message.blocks = text, blocks
        return True

    def find(self, user: str, ephemeral_id: object) -> dict[str, Any] | None:
        return next(
            (e for e in self.ephemerals if e["user"] == user and e["id"] == ephemeral_id), None
        )

    def dismiss(self, user: str, ephemeral_id: int) -> bool:
        found = self.find(user, ephemeral_id)
        if found is not None:
            self.ephemerals.remove(found)
        return found is not None

    def choose(self, user: str, ts: str, action_id: str, value: str) -> None:
        """A feedback button clicked: it shows as chosen to this person."""
        self.chosen.setdefault(user, {}).setdefault(ts, {})[action_id] = value

    def view(self, user: str, channel: str = CHANNEL) -> list[dict[str, Any]]:
        """This person's messages in `channel` (local mode's general channel by default)."""
        chosen = self.chosen.get(user, {})
        return [
            {
                "id": e["id"],
                "thread_ts": e["thread_ts"],
                "text": e["text"],
                "blocks": blocks_view(e["blocks"], chosen.get(e["ts"], {})),
            }
            for e in self.ephemerals
            if e["user"] == user and e.get("channel", CHANNEL) == channel
        ]
