"""What the page shows one person, as `/ui/state` sends it: the bot's state, the channel's
threads and the person's DM with the app, what only they see, what waits in the outbox for
the bot, the clicks the bot answered; at once, or once something changed."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from dataclasses import KW_ONLY, dataclass
from typing import Any

from bot.standin.container_view import container_state, current_offers, with_sessions
from bot.standin.ephemeral import OnlyYou
from bot.standin.local_workspaces import USERS, Place, Places
from bot.standin.outbox import Outbox
from bot.standin.slack_api import SlackWebApi
from bot.standin.supervisor import BotSupervisor
from bot.standin.view import threads_view

WATCH_TICK = 0.25  # seconds: how often a waiting /ui/state looks again without an API call
WATCH_LIMIT = 15.0  # seconds a /ui/state with `seen` waits for something new


@dataclass(eq=False)
class PageState:
    api: SlackWebApi
    places: Places
    only_you: OnlyYou
    outbox: Outbox
    supervisor: BotSupervisor
    _: KW_ONLY
    demo: bool

    def state(self, user: str, place: Place | None = None) -> dict[str, Any]:
        """Everything the page shows this person of a workspace (the first unless `place`
        says); `etag` names this version of it."""
        place = place or self.places.all[0]
        # Shown as waiting when the bot is down, or did not take it at the first try; not
        # while a delivery is merely on its way.
        up = self.supervisor.up
        held = [item for item in self.outbox.items if not up or item["attempts"]]
        now, chosen = time.time(), self.only_you.chosen.get(user, {})
        dm = self.places.dm(user, place)
        interrupted = self.supervisor.recovery.interrupted

        def threads(channel: str) -> list[dict[str, Any]]:
            return threads_view(
                self.api,
                pending={item["ts"] for item in held if item["kind"] == "event"},
                recovering=set(interrupted.values()),
                chosen=chosen,
                now=now,
                channel=channel,
            )

        def ephemeral(channel: str) -> list[dict[str, Any]]:
            return current_offers(self.api, self.only_you.view(user, channel), channel, now)

        names = {uid: name for name, uid in USERS.items()} | {self.api.bot_user: "agent"}
        state = {
            "demo": self.demo,
            "model": self.supervisor.child.model(self.supervisor.key_missing),
            "model_warning": self.supervisor.model_warning,
            "agent": self.supervisor.child.agent(),
            "bot": self.supervisor.state,
            "recovering": len(interrupted),
            "queued": len(self.outbox.items),
            "channel": place.channel_name,
            "team": place.team,
            "workspaces": self.places.view(),
            "threads": with_sessions(self.api, threads(place.channel), place.channel),
            "ephemeral": ephemeral(place.channel),
            **container_state(self.api, dm, user, threads(dm.channel)),
            "dm_ephemeral": ephemeral(dm.channel),
            "waiting": self._waiting(held, user, place),
            "clicks": [c for c in self.outbox.clicks if c["user"] == user],
            "users": list(USERS),
            "names": names,
            "roles": self.supervisor.child.roles(),
        }
        digest = hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()
        return state | {"etag": digest[:20]}

    async def watch(
        self, user: str, seen: str, within: float = WATCH_LIMIT, place: Place | None = None
    ) -> dict[str, Any]:
        """The state once it is no longer the one the page has (`seen`), or after `within`
        seconds: a Web API call wakes it at once (streamed text shows as it comes), other
        changes within WATCH_TICK."""
        deadline = time.monotonic() + within
        changed = self.api.changed
        while True:
            async with changed:
                state = self.state(user, place)
                done = time.monotonic() >= deadline or self.supervisor.stopping
                if state["etag"] != seen or done:
                    return state
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(WATCH_TICK):
                        await changed.wait()

    def _waiting(self, held: list[dict[str, Any]], user: str, place: Place) -> list[dict[str, Any]]:
        """This person's commands and clicks in that workspace that wait for the bot."""
        return [
            {
                "id": item["id"],
                "thread_ts": item.get("thread_ts"),
                "channel": item.get("channel") or place.channel,
                "label": (
                    f"{item['command']} {item['text']}".strip()
                    if item["kind"] == "command"
                    else item.get("label") or "a button"
                ),
            }
            for item in held
            if item["kind"] != "event"
            and item["user"] == user
            and item.get("team", self.places.all[0].team) == place.team
        ]
