"""Stops and an admin's discard in a chaos run (`bench.chaos.run`), each sent when its
thread's run comes to the moment the plan says: the model asked (`working`), a card shown,
an approval, a final answer (`finishing`); and the admin's stops that Slack sends again
(`redelivered`): soon after, after the run ended, or while the thread's next run works."""

from __future__ import annotations

import asyncio
import time

from bench.chaos.classify import PostKind, classify_post
from bench.chaos.facts import RedeliveredStopFacts, StopFacts, thread_of_tag
from bench.chaos.people import People, ThreadState, event_of
from bench.chaos.plan import ADMIN, Step, StopPlan
from bench.chaos.shapes import RedeliveredStop
from bench.chaos.slack import TEAM, Delivery, SlackSide
from bot.slackapp.agent_blocks import STOP, stop_blocks
from bot.standin import requests

WAIT_AGAIN = 6.0  # seconds a redelivery waits for its moment at most, then is sent anyway


class Stoppers:
    def __init__(
        self, people: People, threads: list[ThreadState], seed: int, slack: SlackSide
    ) -> None:
        self.people = people
        self.api = people.api
        self.slack = slack
        self.deliverer = people.deliverer
        self.note = people.note
        self.threads = threads
        self.seed = seed
        self.stops: list[tuple[StopFacts, str | None]] = []  # and the button's token
        self.redelivered: list[RedeliveredStopFacts] = []

    def watch_model(self, what: str, agent: str, tags: set[str]) -> None:
        """The model was asked (`working`), or gave a final answer (`finishing`), in a
        thread of this run."""
        moment = "working" if what == "request" else "finishing"
        now = time.time()
        for index in {thread_of_tag(t) for t in tags if t.startswith(f"s{self.seed}t")}:
            if index is not None and index < len(self.threads):
                self.threads[index].moments[moment].set()
                if what == "request":
                    self.threads[index].asked.append(now)

    async def stopper(self, thread: ThreadState, stop: StopPlan, quit: asyncio.Event) -> None:
        if not await thread.reached(stop.moment, quit):
            self.note("stop_not_sent", thread=thread.plan.index, moment=stop.moment)
            return
        async with self.people.deciding_in(thread, "stopper_error"):
            await asyncio.sleep(stop.delay)
            if thread.ts is not None and not quit.is_set():
                await self._stop(thread, stop)

    async def _stop(self, thread: ThreadState, stop: StopPlan) -> Delivery:
        """The Stop control's button (its value names the thread), the reply `stop`, or
        Slack's own stop of the thread's agent session (`agent_session_stopped`)."""
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
        elif stop.via == "reply":
            reply = self.api.add_user_message(thread.plan.channel, stop.by, "stop", thread.ts)
            self.stops.append((facts, None))
            delivery = await self.deliverer.event(event_of(reply, "message"), "stop")
            facts.acked = delivery.acked
        else:
            stopped = requests.agent_session_stopped(
                user=stop.by, channel=thread.plan.channel, thread_ts=thread.ts, streams=[]
            )
            self.stops.append((facts, None))
            delivery = await self.deliverer.event(stopped, f"Slack's stop by {stop.by}")
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
        return delivery

    async def redeliver(
        self, thread: ThreadState, plan: RedeliveredStop, quit: asyncio.Event
    ) -> None:
        """The admin stops the thread's run; Slack sends that same request again later."""
        if not await thread.reached(plan.moment, quit):
            self.note("stop_not_sent", thread=thread.plan.index, moment=plan.moment)
            return
        async with self.people.deciding_in(thread, "stopper_error"):
            await asyncio.sleep(plan.delay)
            if thread.ts is None or quit.is_set():
                return
            stop = StopPlan(plan.moment, plan.via, ADMIN, plan.delay)
            sent = time.time()
            delivery = await self._stop(thread, stop)
            found = RedeliveredStopFacts(
                thread=thread.plan.index,
                via=plan.via,
                moment=plan.moment,
                again=plan.again,
                sent_at=sent,
                acked=delivery.acked,
                acked_at=delivery.acked_at,
            )
            self.redelivered.append(found)
            await self._until_again(thread, plan, delivery.acked_at or sent, quit)
            await asyncio.sleep(plan.again_delay)
            token = next(
                (t for f, t in self.stops if f.user == ADMIN and f.thread == thread.plan.index),
                None,
            )
            found.answered_before = self._answers(thread, sent, token)
            attempt = await self.deliverer.again(delivery)
            found.resent.append(attempt)
            self.note(
                "stop_again",
                thread=thread.plan.index,
                via=plan.via,
                attempt=attempt,
                ended=self._ended_after(thread, delivery.acked_at or sent),
                asked=thread.asked,
            )

    async def _until_again(
        self, thread: ThreadState, plan: RedeliveredStop, since: float, quit: asyncio.Event
    ) -> None:
        """Until the moment of the redelivery: at once (`soon`); once the thread shows the
        run ended after the stop (an answer or a notice: `after_run`); once the model is
        asked again after that (`next_run`). At most `WAIT_AGAIN` seconds."""
        deadline = time.monotonic() + WAIT_AGAIN
        ended: float | None = None
        while plan.again != "soon" and time.monotonic() < deadline and not quit.is_set():
            if ended is None:
                ended = self._ended_after(thread, since)
            if ended is not None and (
                plan.again == "after_run" or any(at > ended for at in thread.asked)
            ):
                return
            await asyncio.sleep(0.05)

    def _answers(self, thread: ThreadState, since: float, token: str | None) -> list[str]:
        """What the admin was told privately of their stop so far."""
        return [
            p.text
            for p in self.slack.private
            if (token is not None and p.token == token)
            or (
                token is None
                and p.user == ADMIN
                and p.channel == thread.plan.channel
                and p.thread_ts == thread.ts
                and p.at >= since
            )
        ]

    def _ended_after(self, thread: ThreadState, since: float) -> float | None:
        """When the thread first showed a run ended after `since`: an answer, a notice."""
        for post in self.slack.posts:
            if post.channel != thread.plan.channel or (post.thread_ts or post.ts) != thread.ts:
                continue
            kind = classify_post(post.args).kind
            if post.at > since and kind in (PostKind.ANSWER, PostKind.NOTICE):
                return post.at
        return None

    async def discarder(
        self, thread: ThreadState, delay: float | None, quit: asyncio.Event
    ) -> None:
        """An admin discards the thread right after an approval, while its tool runs."""
        if delay is None or not await thread.reached("approved", quit):
            return
        async with self.people.deciding_in(thread, "discarder_error"):
            await asyncio.sleep(delay)
            if thread.ts is not None:
                await self.people.command(thread, Step("discard", 0, user=ADMIN))
