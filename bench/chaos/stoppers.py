"""Stops and an admin's discard in a chaos run (`bench.chaos.run`), each sent when its
thread's run comes to the moment the plan says: the model asked (`working`), a card shown,
an approval, a final answer (`finishing`)."""

from __future__ import annotations

import asyncio
import time

from bench.chaos.facts import StopFacts, thread_of_tag
from bench.chaos.people import People, ThreadState, event_of
from bench.chaos.plan import ADMIN, Step, StopPlan
from bench.chaos.slack import TEAM
from bot.slackapp.agent_blocks import STOP, stop_blocks
from bot.standin import requests


class Stoppers:
    def __init__(self, people: People, threads: list[ThreadState], seed: int) -> None:
        self.people = people
        self.api = people.api
        self.deliverer = people.deliverer
        self.note = people.note
        self.threads = threads
        self.seed = seed
        self.stops: list[tuple[StopFacts, str | None]] = []  # and the button's token

    def watch_model(self, what: str, agent: str, tags: set[str]) -> None:
        """The model was asked (`working`), or gave a final answer (`finishing`), in a
        thread of this run."""
        moment = "working" if what == "request" else "finishing"
        for tag in tags:
            index = thread_of_tag(tag)
            if tag.startswith(f"s{self.seed}t") and index is not None:
                self.threads[index].moments[moment].set()

    async def _at_moment(self, thread: ThreadState, moment: str, quit: asyncio.Event) -> bool:
        """Wait for the moment to come in the thread; False if the run ends first."""
        came = asyncio.create_task(thread.moments[moment].wait())
        ended = asyncio.create_task(quit.wait())
        try:
            await asyncio.wait({came, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            came.cancel()
            ended.cancel()
        return thread.moments[moment].is_set() and not quit.is_set()

    async def stopper(self, thread: ThreadState, stop: StopPlan, quit: asyncio.Event) -> None:
        if not await self._at_moment(thread, stop.moment, quit):
            self.note("stop_not_sent", thread=thread.plan.index, moment=stop.moment)
            return
        self.people.deciding += 1
        try:
            await asyncio.sleep(stop.delay)
            if thread.ts is not None and not quit.is_set():
                await self._stop(thread, stop)
        except Exception as exc:  # a harness slip must not stop the run
            self.note("stopper_error", thread=thread.plan.index, error=repr(exc))
        finally:
            self.people.deciding -= 1

    async def _stop(self, thread: ThreadState, stop: StopPlan) -> None:
        """The Stop control's button (its value names the thread), or the reply `stop`."""
        assert thread.ts is not None and thread.key is not None
        facts = StopFacts(
            thread=thread.plan.index,
            user=stop.by,
            via=stop.via,
            moment=stop.moment,
            sent_at=time.time(),
        )
        token: str | None = None
        if stop.via == "button":
            url, token = self.deliverer.response_url()
            control = {"ts": f"{thread.ts}9", "text": "", "blocks": stop_blocks(thread.key)}
            body = requests.block_actions(
                team=TEAM,
                user=stop.by,
                channel=thread.plan.channel,
                message=control,
                action_id=STOP,
                value=str(thread.key),
                response_url=url,
                thread_ts=thread.ts,
                ephemeral=True,
            )
            self.stops.append((facts, token))
            delivery = await self.deliverer.once("click", body, f"Stop by {stop.by}")
            facts.acked = delivery.acked
        else:
            reply = self.api.add_user_message(thread.plan.channel, stop.by, "stop", thread.ts)
            self.stops.append((facts, None))
            delivery = await self.deliverer.event(event_of(reply, "message"), "stop")
            facts.acked = delivery.acked
        facts.acked_at = time.time()
        self.note(
            "stop",
            thread=thread.plan.index,
            via=stop.via,
            by=stop.by,
            moment=stop.moment,
            acked=facts.acked,
            token=token,
            attempts=delivery.attempts,
        )

    async def discarder(
        self, thread: ThreadState, delay: float | None, quit: asyncio.Event
    ) -> None:
        """An admin discards the thread right after an approval, while its tool runs."""
        if delay is None or not await self._at_moment(thread, "approved", quit):
            return
        self.people.deciding += 1
        try:
            await asyncio.sleep(delay)
            if thread.ts is not None:
                await self.people.command(thread, Step("discard", 0, user=ADMIN))
        except Exception as exc:
            self.note("discarder_error", thread=thread.plan.index, error=repr(exc))
        finally:
            self.people.deciding -= 1
