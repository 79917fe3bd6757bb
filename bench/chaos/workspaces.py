"""Installs through the OAuth flow, and a chaos run's second workspace that removes the app
(`bench.chaos.shapes.UninstallPlan`).

An install is what a browser does: the bot's install page (`GET /slack/install` on a live
replica: its "Add to Slack" link, and bolt's state cookie), the stand-in's authorize page
for that workspace (approved at once: a redirect with a one-time code), and the bot's
redirect (`GET /slack/oauth_redirect` with the code, the state and the cookie, on a live
replica: the states are signed, any replica checks them). The bot trades the code for the
workspace's token at the stand-in (`oauth.v2.access`) and keeps the installation.

The removal: the stand-in revokes the workspace's tokens (as Slack does), then Slack's event
(`app_uninstalled`, or `tokens_revoked` naming the bot) is delivered, and sent again with
the same event id; after a reinstall, once more."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from bench.chaos.facts import UninstallFacts, WorkspaceThread
from bench.chaos.faults import Cluster
from bench.chaos.people import event_of
from bench.chaos.plan import STARTERS
from bench.chaos.shapes import UninstallPlan
from bench.chaos.slack import Deliverer, SlackSide
from storage import ConversationKey

LINK = re.compile(r'<a href="([^"]+)"')
INSTALL_SECONDS = 30.0  # an install is tried again this long: past a restart under load
CARD_WAIT = 4.0  # seconds a step waits for a conversation's approval request at most


class Installer:
    def __init__(self, slack: SlackSide, cluster: Cluster, note: Callable[..., None]) -> None:
        self.slack = slack
        self.cluster = cluster
        self.note = note

    async def install(self, team: str) -> bool:
        """Install the app in `team` through the OAuth flow (tried again, at each replica in
        turn, for as long as a replica may take to restart: faults strike meanwhile)."""
        timeout = aiohttp.ClientTimeout(total=10)
        deadline = time.monotonic() + INSTALL_SECONDS
        attempt = 0
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while True:
                try:
                    if await self._install(http, team, attempt):
                        self.note("installed", team=team, attempt=attempt)
                        return True
                except (aiohttp.ClientError, TimeoutError, AssertionError) as exc:
                    self.note("install_failed", team=team, attempt=attempt, error=repr(exc))
                if time.monotonic() > deadline:
                    return False
                attempt += 1
                await asyncio.sleep(0.5)

    async def _install(self, http: aiohttp.ClientSession, team: str, attempt: int) -> bool:
        live = self.cluster.endpoints()
        if not live:
            return False
        async with http.get(f"{live[attempt % len(live)]}/slack/install") as page:
            assert page.status == 200, f"install page {page.status}"
            cookie = page.headers["Set-Cookie"].split(";", 1)[0]
            found = LINK.search(await page.text())
        assert found is not None, "no install link"
        authorize = found.group(1).replace("&amp;", "&") + f"&team={team}"
        async with http.get(authorize, allow_redirects=False) as approved:
            assert approved.status == 302, f"authorize page {approved.status}"
            back = urlsplit(approved.headers["Location"])
        live = self.cluster.endpoints() or live
        redirect = f"{live[-1]}{back.path}?{back.query}"
        async with http.get(redirect, headers={"Cookie": cookie}) as done:
            await done.read()
            return done.status == 200


def removal_event(kind: str, bot_user: str) -> dict[str, Any]:
    """What Slack sends when a workspace removes the app."""
    sent = f"{time.time():.6f}"
    if kind == "app_uninstalled":
        return {"type": "app_uninstalled", "event_ts": sent}
    return {"type": "tokens_revoked", "tokens": {"oauth": [], "bot": [bot_user]}, "event_ts": sent}


class SecondWorkspace:
    """A run's second workspace (`TW<seed>`, channel `CW<seed>`): installed, a conversation
    begun, the app removed and the removal sent again; installed again, another
    conversation, the removal once more. What happened is kept in `self.facts`."""

    def __init__(
        self,
        seed: int,
        plan: UninstallPlan,
        *,
        slack: SlackSide,
        deliverer: Deliverer,
        installer: Installer,
        note: Callable[..., None],
    ) -> None:
        self.seed = seed
        self.plan = plan
        self.slack = slack
        self.api = slack.api
        self.deliverer = deliverer
        self.installer = installer
        self.note = note
        self.team = f"TW{seed}"
        self.channel = f"CW{seed}"
        self.facts = UninstallFacts(team=self.team, kind=plan.kind)
        self.busy = False  # playing its steps (the run is not quiet meanwhile)

    def keys(self) -> list[ConversationKey]:
        return [c.key for c in (self.facts.before, self.facts.after) if c is not None]

    async def play(self, quit: asyncio.Event) -> None:
        self.busy = True
        try:
            await self._play(quit)
        except Exception as exc:  # a harness slip must not stop the run
            self.note("workspace_error", error=repr(exc))
        finally:
            self.busy = False

    async def _play(self, quit: asyncio.Event) -> None:
        plan, facts = self.plan, self.facts
        await asyncio.sleep(plan.begin)
        self.api.add_team(self.team, f"Chaos {self.seed}", channels=(self.channel,))
        if not await self.installer.install(self.team):
            return
        facts.before = await self._converse(0, STARTERS[0])
        await asyncio.sleep(plan.uninstall_after)
        self.api.uninstall(self.team)  # Slack revokes its tokens, then tells the app
        event = removal_event(plan.kind, self.api.bot_user)
        first = await self.deliverer.event(event, f"{plan.kind} {self.team}", team=self.team)
        facts.event_id = str(_event_id(first.body))
        facts.acked_at = first.acked_at
        self.note("uninstall", team=self.team, kind=plan.kind, acked=first.acked)
        await asyncio.sleep(plan.redeliver_after)
        facts.resent.append(await self.deliverer.again(first))
        if not plan.reinstall or quit.is_set():
            return
        await asyncio.sleep(plan.reinstall_after)
        facts.reinstall_began = time.time()
        if not await self.installer.install(self.team):
            return
        facts.reinstalled_at = time.time()
        facts.after = await self._converse(1, STARTERS[1])
        await asyncio.sleep(plan.again_after)
        facts.resent.append(await self.deliverer.again(first))
        self.note("uninstall_again", team=self.team, attempts=first.attempts)
        await self._card(facts.after)  # (its approval request, posted with the new token)

    async def _converse(self, number: int, user: str) -> WorkspaceThread:
        """A request that asks for approval, in a thread of its own."""
        tag = f"s{self.seed}w{number}m0"
        text = f"<@{self.api.bot_user}> transfer {number + 5} to ana #{tag}"
        message = self.api.add_user_message(self.channel, user, text)
        key = ConversationKey(team=self.team, channel=self.channel, thread_ts=message.ts)
        thread = WorkspaceThread(key=key)
        delivery = await self.deliverer.event(
            event_of(message, "app_mention", team=self.team), tag, team=self.team
        )
        thread.acked_at = delivery.acked_at
        self.note("workspace_request", tag=tag, key=str(key), acked=delivery.acked)
        await self._card(thread)
        return thread

    async def _card(self, thread: WorkspaceThread) -> None:
        deadline = time.monotonic() + CARD_WAIT
        while time.monotonic() < deadline:
            if self.api.bot_replies(self.channel, thread.key.thread_ts):
                return
            await asyncio.sleep(0.1)


def _event_id(body: str) -> str:
    return str(json.loads(body).get("event_id", ""))
