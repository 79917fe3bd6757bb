"""An admin's Discard from a Home tab that listed a thread as stale, clicked after the thread
came back to life (`bench.chaos.shapes.HomeDiscardPlan`).

The thread's approval request waits past the replicas' `BOT_STALE_AFTER`; the admin opens
their Home tab (`app_home_opened`) and the harness takes the Discard button's value for the
thread: from the published tab, or, when the tab does not show it (it lists the oldest
stale conversations of every run of the soak first), as the tab makes it (`Listed.of` the
thread's record, read then). The approval comes; right after it (the run working again) or
once the run answered, the admin clicks Discard with that value (a `block_actions` on the
Home view, as Slack sends it). The tab the bot publishes next says what became of it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from bench.chaos.classify import PostKind, classify_post
from bench.chaos.facts import HomeDiscardFacts
from bench.chaos.people import People, ThreadState
from bench.chaos.plan import ADMIN
from bench.chaos.shapes import STALE_AFTER, HomeDiscardPlan
from bench.chaos.slack import TEAM, SlackSide
from bot.runtime import Listed
from bot.slackapp.home_blocks import DISCARD
from bot.standin import requests
from storage import Status, Store

VIEW_WAIT = 5.0  # seconds to wait for the tab the bot publishes


class StaleHomeDiscards:
    def __init__(self, people: People, slack: SlackSide, store: Store) -> None:
        self.people = people
        self.slack = slack
        self.api = slack.api
        self.deliverer = people.deliverer
        self.store = store
        self.note: Callable[..., None] = people.note
        self.found: list[HomeDiscardFacts] = []

    async def discard(
        self, thread: ThreadState, plan: HomeDiscardPlan, quit: asyncio.Event
    ) -> None:
        if not await thread.reached("card", quit):
            return
        async with self.people.deciding_in(thread, "home_discard_error"):
            await self._stale(thread, quit)
            if quit.is_set() or thread.moments["approved"].is_set():
                self.note("home_discard_skipped", thread=thread.plan.index, why="decided first")
                return
            listed = await self._listing(thread)
            if listed is None:
                return
            facts, view = listed
            self.found.append(facts)
            if not await thread.reached("approved", quit):
                return
            if plan.when == "answered":
                await self._answered_after(thread, time.time(), quit)
            await asyncio.sleep(plan.delay)
            if not quit.is_set():
                await self._click(facts, view)

    async def _stale(self, thread: ThreadState, quit: asyncio.Event) -> None:
        """Until the thread has waited for its approval, idle, a little past the stale age
        (messages kept meanwhile are activity), or its approval came, or its state expired
        (an expiry run: nothing is left to list; `_listing` notes it skipped)."""
        assert thread.key is not None
        while not (quit.is_set() or thread.moments["approved"].is_set()):
            record = await asyncio.to_thread(self.store.get, thread.key)
            if record is None:
                return
            if record.status is Status.AWAITING_APPROVAL:
                idle = time.time() - record.last_activity_at.timestamp()
                if idle > STALE_AFTER + 0.3:
                    return
            await asyncio.sleep(0.1)

    async def _listing(self, thread: ThreadState) -> tuple[HomeDiscardFacts, dict[str, Any]] | None:
        """The admin's tab, opened now, and the Discard value it lists for the thread."""
        key = thread.key
        assert key is not None
        listed_at = time.time()
        view = await self._open_home()
        for value in _discard_values(view):
            shown = Listed.model_validate_json(value)
            if shown.key == key:
                facts = HomeDiscardFacts(thread.plan.index, listed_at, "tab", json.loads(value))
                return facts, view or {}
        record = await asyncio.to_thread(self.store.get, key)
        if record is None or record.status is not Status.AWAITING_APPROVAL:
            why = record.status.value if record else "no record"
            self.note("home_discard_skipped", thread=thread.plan.index, why=why)
            return None
        value = Listed.of(record).model_dump_json(exclude_none=True)
        facts = HomeDiscardFacts(thread.plan.index, listed_at, "store", json.loads(value))
        return facts, view or {}

    async def _open_home(self) -> dict[str, Any] | None:
        published = len(self.api.views.get(ADMIN, []))
        event = requests.app_home_opened(user=ADMIN, channel=f"D0{ADMIN}", tab="home")
        delivery = await self.deliverer.event(event, "Home opened")
        return await self._next_view(published) if delivery.acked else None

    async def _next_view(self, published: int) -> dict[str, Any] | None:
        deadline = time.monotonic() + VIEW_WAIT
        while time.monotonic() < deadline:
            views = self.api.views.get(ADMIN, [])
            if len(views) > published:
                return views[-1]
            await asyncio.sleep(0.05)
        return None

    async def _answered_after(self, thread: ThreadState, since: float, quit: asyncio.Event) -> None:
        deadline = time.monotonic() + 8.0
        while time.monotonic() < deadline and not quit.is_set():
            for post in self.slack.posts:
                where = (post.channel, post.thread_ts or post.ts)
                if where != (thread.plan.channel, thread.ts) or post.at <= since:
                    continue
                if classify_post(post.args).kind is PostKind.ANSWER:
                    return
            await asyncio.sleep(0.05)

    async def _click(self, facts: HomeDiscardFacts, view: dict[str, Any]) -> None:
        published = len(self.api.views.get(ADMIN, []))
        body = requests.view_actions(
            team=TEAM,
            user=ADMIN,
            view={"id": view.get("id", "V0HOME"), "blocks": view.get("blocks", [])},
            action_id=DISCARD,
            value=json.dumps(facts.listed, separators=(",", ":")),
        )
        facts.clicked_at = time.time()
        delivery = await self.deliverer.once("click", body, "Discard from a stale Home tab")
        facts.acked = delivery.acked
        answer = await self._next_view(published) if delivery.acked else None
        facts.answer = _note(answer)
        self.note(
            "home_discard",
            thread=facts.thread,
            listed_from=facts.listed_from,
            acked=facts.acked,
            answer=facts.answer,
        )


def _discard_values(view: dict[str, Any] | None) -> list[str]:
    found = []
    for block in (view or {}).get("blocks", []):
        accessory = block.get("accessory") or {}
        if accessory.get("action_id") == DISCARD:
            found.append(str(accessory.get("value")))
    return found


def _note(view: dict[str, Any] | None) -> str:
    """The note a published tab begins with (what became of a click), if any."""
    blocks = (view or {}).get("blocks", [])
    if blocks and blocks[0].get("type") == "context":
        return " ".join(str(e.get("text", "")) for e in blocks[0].get("elements", []))
    return ""
