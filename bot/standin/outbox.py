"""The durable outbox: what the page sent and the bot has not acknowledged yet, delivered to
the bot like Slack delivers (signed, one at a time, in order, a retry saying so). Kept with
the page's state (`standin.json`) while the bot is down or restarting; delivered once it
answers again."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp

from bot.standin.local_workspaces import Places
from bot.standin.requests import FORM, block_actions, event_callback, signed_headers, slash_command
from bot.standin.slack_api import Message, SlackWebApi

log = logging.getLogger(__name__)
CLICKS_KEPT = 50  # clicks delivered, with the bot's answer, for the page and tests
SERVER_ERROR_RETRIES = 3  # like Slack: a 5xx answer is retried three times, then dropped


class Outbox:
    def __init__(
        self,
        api: SlackWebApi,
        places: Places,
        *,
        secret: str,
        bot_url: str,
        save: Callable[[], None],
        bot_up: Callable[[], bool],
    ) -> None:
        self.api = api
        self.places = places
        self.secret = secret  # the bot's signing secret
        self.bot_url = bot_url
        self.save = save  # the page's state, this outbox with it
        self.bot_up = bot_up
        # What the page sent and the bot has not acknowledged yet, oldest first.
        self.items: list[dict[str, Any]] = []
        # Clicks the bot answered: {"user", "ts", "action_id", "action_type", "value", "status"}
        self.clicks: list[dict[str, Any]] = []
        self.http: aiohttp.ClientSession | None = None  # the stand-in's, while it serves
        self._wake = asyncio.Event()

    def enqueue(self, item: dict[str, Any]) -> None:
        self.items.append({"id": uuid.uuid4().hex, "attempts": 0, **item})
        self.save()
        self.wake()

    def wake(self) -> None:
        """The delivery loop looks again: something was queued, or the bot came or went."""
        self._wake.set()

    @property
    def considered(self) -> bool:
        """The delivery loop has looked at the outbox since it was last woken."""
        return not self._wake.is_set()

    async def deliver_forever(self) -> None:
        """One at a time, in order: POST with Slack's signature while the bot is up; a retry
        says so (X-Slack-Retry-Num). Kept until the bot answers: a kill, a restart or
        Ctrl-C in between loses nothing."""
        while True:
            await self._until(lambda: bool(self.items) and self.bot_up())
            item = self.items[0]
            try:
                status = await self._post(item)
            except Exception:  # e.g. a hand-edited state file: drop it, keep the rest going
                log.exception("cannot deliver %s; dropped", item.get("kind"))
                status = 400
            if status is not None and (status < 500 or item["attempts"] >= SERVER_ERROR_RETRIES):
                if status >= 400:
                    log.error("the bot answered %s to a %s; dropped", status, item["kind"])
                if item["kind"] == "click":
                    self._clicked(item, status)
                if self.items and self.items[0] is item:
                    self.items.pop(0)
                self.save()
                continue
            item["attempts"] += 1
            await asyncio.sleep(0.5)

    async def _until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            self._wake.clear()
            await self._wake.wait()

    def _clicked(self, item: dict[str, Any], status: int) -> None:
        """A click the bot answered, and how."""
        fields = ("user", "ts", "action_id", "action_type", "value")
        self.clicks.append({name: item.get(name) for name in fields} | {"status": status})
        del self.clicks[:-CLICKS_KEPT]

    async def _post(self, item: dict[str, Any]) -> int | None:
        assert self.http is not None
        body, content_type = self._body(item)
        headers = {"Content-Type": content_type, **signed_headers(body, self.secret)}
        if item["attempts"]:
            headers |= {
                "X-Slack-Retry-Num": str(item["attempts"]),
                "X-Slack-Retry-Reason": "http_timeout",
            }
        try:
            async with self.http.post(
                f"{self.bot_url}/slack/events",
                data=body.encode(),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=3),
            ) as response:
                return response.status
        except (aiohttp.ClientError, TimeoutError):
            return None

    def _body(self, item: dict[str, Any]) -> tuple[str, str]:
        """Built at delivery time, so the signature's time stamp is fresh."""
        place = self.places.find(item.get("team")) or self.places.all[0]
        team, channel = place.team, str(item.get("channel") or place.channel)
        if item["kind"] == "form":  # a click on a Home view (`container_routes`)
            return str(item["body"]), FORM
        if item["kind"] == "event":
            return event_callback(team, item["event"], item["event_id"]), "application/json"
        if item["kind"] == "command":
            body = slash_command(
                team=team,
                channel=channel,
                user=item["user"],
                command=item["command"],
                text=item["text"],
                response_url=item["response_url"],
            )
            return body, FORM
        return self._click_body(item, team, channel), FORM

    def _click_body(self, item: dict[str, Any], team: str, channel: str) -> str:
        """A click as Slack sends it: with the message it was clicked on, as it is now."""
        ts = item["ts"]
        message = self.api.messages.get((channel, ts)) or Message(channel, ts, "", item["user"])
        shown: dict[str, Any] = {"ts": ts, "text": message.text, "blocks": message.blocks or []}
        if message.thread_ts:
            shown["thread_ts"] = message.thread_ts
        return block_actions(
            team=team,
            user=item["user"],
            channel=channel,
            message=shown,
            action_id=item["action_id"],
            value=item["value"],
            response_url=item["response_url"],
            block_id=item.get("block_id", "b"),
            action_type=item.get("action_type", "button"),
            thread_ts=item.get("thread_ts"),
            ephemeral=bool(item.get("ephemeral")),
        )
