"""`/resume` at the run cap (`bench.chaos.shapes.ResumeAtCapPlan`): the replicas run with a
small `BOT_MAX_RUNS`; a thread's first request failed at the model, which interrupted its
run. Once the thread says so, another thread begins with a request the model ponders over
(its run holds a slot), and, right after the model got it, the first thread's starter sends
`/resume`. A replica with no slot free answers that it is queued; either way no replica has
more model calls at once than its cap (`runs_over_cap`, from the model server's log)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from bench.chaos.classify import classify_post
from bench.chaos.facts import ResumeAtCapFacts
from bench.chaos.people import People, ThreadState
from bench.chaos.plan import Step
from bench.chaos.shapes import ResumeAtCapPlan
from bench.chaos.slack import SlackSide

WAIT = 20.0  # seconds to wait for the interruption, and for the model to get the request


class ResumesAtCap:
    def __init__(self, people: People, slack: SlackSide, given: dict[str, float]) -> None:
        self.people = people
        self.slack = slack
        self.given = given  # the model server's: tag -> when first given
        self.note: Callable[..., None] = people.note
        self.found: list[ResumeAtCapFacts] = []

    async def play(
        self,
        thread: ThreadState,
        holder: ThreadState,
        plan: ResumeAtCapPlan,
        quit: asyncio.Event,
    ) -> None:
        if not await self._until(lambda: self._interrupted(thread), quit):
            self.note("resume_at_cap_skipped", thread=plan.thread, why="never interrupted")
            return
        self.people.deciding += 1
        try:
            [step] = holder.plan.steps
            tag = step.tag
            if not await self.people.begin(holder, step):
                return
            facts = ResumeAtCapFacts(plan.thread, holder=tag)
            self.found.append(facts)
            if not await self._until(lambda: tag in self.given, quit):
                self.note("resume_at_cap_skipped", thread=plan.thread, why="holder never asked")
                return
            facts.holding_at = self.given[tag]
            await asyncio.sleep(plan.delay)
            facts.sent_at = time.time()
            acked, facts.token = await self.people.command(
                thread, Step("resume", 0.0, user=thread.plan.starter)
            )
            facts.acked_at = time.time() if acked else 0.0
        finally:
            self.people.deciding -= 1

    def _interrupted(self, thread: ThreadState) -> bool:
        key = thread.key
        return key is not None and any(
            p.channel == key.channel
            and (p.thread_ts or p.ts) == key.thread_ts
            and classify_post(p.args).notice == "run_failed"
            for p in self.slack.posts
        )

    async def _until(self, condition: Callable[[], bool], quit: asyncio.Event) -> bool:
        deadline = time.monotonic() + WAIT
        while not condition():
            if quit.is_set() or time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.1)
        return True
