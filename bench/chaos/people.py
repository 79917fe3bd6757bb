"""The people of one chaos run (`bench.chaos.run`): in each thread its plan's messages and
commands, and a decision on each approval request that shows buttons; what they sent is
kept for the checks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from bench.chaos.classify import approval_buttons
from bench.chaos.facts import SentMessage
from bench.chaos.plan import STRANGER, Decision, Step, ThreadPlan
from bench.chaos.slack import TEAM, Deliverer
from bot.permalink import permalink
from bot.slackapp.blocks import APPROVE, REJECT
from bot.standin import requests
from bot.standin.slack_api import Message, SlackWebApi
from storage import ConversationKey

MOMENTS = ("working", "card", "approved", "finishing")  # what a stop may wait for


@dataclass
class ThreadState:
    plan: ThreadPlan
    ts: str | None = None
    handled: set[tuple[str, int]] = field(default_factory=set)
    approved_clicks: set[str] = field(default_factory=set)
    rejected_clicks: set[str] = field(default_factory=set)
    approve_replies: list[float] = field(default_factory=list)
    reject_replies: list[float] = field(default_factory=list)
    clicks: list[float] = field(default_factory=list)  # when each click or command was acked
    late_clicks: list[float] = field(default_factory=list)  # of them, the late ones
    asked: list[float] = field(default_factory=list)  # when the model was asked about it
    # The moments of its run a stop (or a discard) waits for, set when they first come.
    moments: dict[str, asyncio.Event] = field(
        default_factory=lambda: {moment: asyncio.Event() for moment in MOMENTS}
    )

    @property
    def key(self) -> ConversationKey | None:
        return (
            ConversationKey(team=TEAM, channel=self.plan.channel, thread_ts=self.ts)
            if self.ts
            else None
        )

    async def reached(self, moment: str, quit: asyncio.Event) -> bool:
        """Wait for the moment to come in the thread; False if the run ends first."""
        came = asyncio.create_task(self.moments[moment].wait())
        ended = asyncio.create_task(quit.wait())
        try:
            await asyncio.wait({came, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            came.cancel()
            ended.cancel()
        return self.moments[moment].is_set() and not quit.is_set()


class People:
    def __init__(self, api: SlackWebApi, deliverer: Deliverer, note: Callable[..., None]) -> None:
        self.api = api
        self.deliverer = deliverer
        self.note = note
        self.sent: list[SentMessage] = []
        self.deciding = 0  # decisions, stops and discards under way
        self.deliveries: list[asyncio.Task[None]] = []

    @contextlib.asynccontextmanager
    async def deciding_in(self, thread: ThreadState, slip: str) -> AsyncIterator[None]:
        """A decision, stop or discard under way in the thread (the run is not quiet
        meanwhile). A harness slip in it is noted as `slip`: it must not stop the run."""
        self.deciding += 1
        try:
            yield
        except Exception as exc:
            self.note(slip, thread=thread.plan.index, error=repr(exc))
        finally:
            self.deciding -= 1

    async def actor(self, thread: ThreadState) -> None:
        plan = thread.plan
        if plan.held:  # begun by a shape's player (`bench.chaos.resume_at_cap`)
            return
        for step in plan.steps:
            await asyncio.sleep(step.pause)
            if step.kind == "say" and thread.ts is None:
                if not await self.begin(thread, step):
                    return
            elif step.kind == "say":
                self.reply(thread, step)
            elif step.kind in ("resume", "discard") and thread.ts is not None:
                await self.command(thread, step)

    async def begin(self, thread: ThreadState, step: Step) -> bool:
        """The thread's first message, a mention; whether it was acked."""
        plan = thread.plan
        message = self.api.add_user_message(
            plan.channel, step.user, f"<@{self.api.bot_user}> {step.text}"
        )
        thread.ts = message.ts
        sent = self._sent(thread, step, message)
        event = event_of(message, "app_mention")
        delivery = await self.deliverer.event(event, step.tag)
        sent.acked = delivery.acked
        sent.acked_at = time.time()
        self.note("delivered", tag=step.tag, acked=delivery.acked, attempts=delivery.attempts)
        if not delivery.acked:
            self.note("thread_abandoned", thread=plan.index, why="mention never acked")
        return delivery.acked

    def reply(self, thread: ThreadState, step: Step) -> SentMessage:
        """`step`'s message in the thread (begun), delivered in the background."""
        assert thread.ts is not None
        text = f"<@{self.api.bot_user}> {step.text}" if step.mention else step.text
        message = self.api.add_user_message(thread.plan.channel, step.user, text, thread.ts)
        sent = self._sent(thread, step, message)
        kinds = ["message", "app_mention"] if step.mention else ["message"]
        self._deliver(sent, [event_of(message, kind) for kind in kinds])
        return sent

    def _sent(self, thread: ThreadState, step: Step, message: Message) -> SentMessage:
        sent = SentMessage(
            tag=step.tag,
            thread=thread.plan.index,
            text=step.text,
            user=step.user,
            sent_at=time.time(),
            decision=not step.tag,
            late=step.late,
        )
        self.sent.append(sent)
        self.note(
            "say",
            thread=thread.plan.index,
            tag=step.tag,
            user=step.user,
            text=message.text,
            ts=message.ts,
        )
        return sent

    def _deliver(self, sent: SentMessage, events: list[dict[str, Any]]) -> None:
        async def one(event: dict[str, Any]) -> None:
            delivery = await self.deliverer.event(event, sent.tag or sent.text)
            sent.acked = sent.acked or delivery.acked
            if delivery.acked:
                sent.acked_at = max(sent.acked_at, time.time())
            self.note(
                "delivered",
                tag=sent.tag or sent.text,
                event=event["type"],
                acked=delivery.acked,
                attempts=delivery.attempts,
            )

        self.deliveries += [asyncio.create_task(one(event)) for event in events]

    async def command(self, thread: ThreadState, step: Step) -> tuple[bool, str]:
        """Send `step`'s command; whether it was acked, and its response_url's token."""
        assert thread.key is not None
        link = permalink(thread.key)
        command, text = (
            ("/resume", link) if step.kind == "resume" else ("/agent-admin", f"discard {link}")
        )
        url, token = self.deliverer.response_url()
        body = requests.slash_command(
            team=TEAM,
            channel=thread.plan.channel,
            user=step.user,
            command=command,
            text=text,
            response_url=url,
        )
        delivery = await self.deliverer.once("command", body, f"{command} {text}")
        if delivery.acked:
            thread.clicks.append(time.time())
        self.note(
            "command",
            thread=thread.plan.index,
            command=command,
            user=step.user,
            acked=delivery.acked,
            token=token,
            attempts=delivery.attempts,
        )
        return delivery.acked, token

    async def decider(self, thread: ThreadState, stop: asyncio.Event) -> None:
        """Decide each approval request that shows buttons, by the plan's next decision."""
        decisions = iter(thread.plan.decisions)
        while not stop.is_set():
            await asyncio.sleep(0.2)
            if thread.ts is None:
                continue
            asked = [
                Asked(m, *buttons[0], _button_value(m) or "", json.dumps(m.blocks))
                for m in self.api.bot_replies(thread.plan.channel, thread.ts)
                if (buttons := approval_buttons(m.blocks))
            ]
            newest: dict[str, int] = {}
            for request in asked:
                newest[request.call_id] = max(newest.get(request.call_id, 0), request.version)
            for request in asked:
                key = (request.call_id, request.version)
                if key in thread.handled or request.version < newest[request.call_id]:
                    continue
                thread.handled.add(key)
                thread.moments["card"].set()
                decision = next(decisions, Decision(True, "button", thread.plan.starter, 0.3))
                async with self.deciding_in(thread, "decider_error"):
                    await asyncio.sleep(decision.delay)
                    if stop.is_set():
                        return
                    await self._decide(thread, request, decision)

    async def _decide(self, thread: ThreadState, request: Asked, decision: Decision) -> None:
        what = {"thread": thread.plan.index, "call": request.call_id, "version": request.version}
        if decision.stranger_first:
            await self._click(request, APPROVE, STRANGER)
        if decision.via == "reply":
            word = "approve" if decision.approve else "reject"
            assert thread.ts is not None
            reply = self.api.add_user_message(thread.plan.channel, decision.by, word, thread.ts)
            (thread.approve_replies if decision.approve else thread.reject_replies).append(
                time.time()
            )
            step = Step("say", 0, text=word, user=decision.by)
            sent = self._sent(thread, step, reply)
            self._deliver(sent, [event_of(reply, "message")])
            self.note("decide", **what, via="reply", approve=decision.approve, by=decision.by)
            if decision.approve:
                thread.moments["approved"].set()
            return
        clicks = thread.approved_clicks if decision.approve else thread.rejected_clicks
        clicks.add(request.call_id)
        acked = False
        for _ in range(3):  # a person clicks again when Slack shows an error or "busy"
            action = APPROVE if decision.approve else REJECT
            acked, answer = await self._click(request, action, decision.by)
            if acked:
                thread.clicks.append(time.time())
                if decision.late:
                    thread.late_clicks.append(thread.clicks[-1])
                if decision.approve:
                    thread.moments["approved"].set()
            self.note(
                "decide",
                **what,
                via="button",
                approve=decision.approve,
                by=decision.by,
                acked=acked,
                answer=answer,
            )
            if acked and "busy" not in answer:
                return
            await asyncio.sleep(1.0)
        if not acked:  # Slack kept failing: the buttons are still there, try again later
            thread.handled.discard((request.call_id, request.version))

    async def _click(self, request: Asked, action_id: str, user: str) -> tuple[bool, str]:
        """Click a button of the request as it looked when it was seen."""
        message = request.message
        url, token = self.deliverer.response_url()
        body = requests.block_actions(
            team=TEAM,
            user=user,
            channel=message.channel,
            message={"ts": message.ts, "text": message.text, "blocks": json.loads(request.blocks)},
            action_id=action_id,
            value=request.value,
            response_url=url,
        )
        delivery = await self.deliverer.once("click", body, f"{action_id} by {user}")
        answer = ""
        if delivery.acked:
            for _ in range(10):  # a refusal comes back to the response_url at once
                found = [r for r in self.api.responses if r.get("_token") == token]
                if found:
                    answer = str(found[0].get("text", ""))
                    break
                await asyncio.sleep(0.1)
        return delivery.acked, answer


def event_of(message: Message, kind: str, *, team: str = TEAM) -> dict[str, Any]:
    """The event Slack sends for a person's message (`message`, or `app_mention`)."""
    event: dict[str, Any] = {
        "type": kind,
        "user": message.user,
        "text": message.text,
        "ts": message.ts,
        "channel": message.channel,
        "event_ts": message.ts,
        "team": team,
    }
    if message.thread_ts:
        event["thread_ts"] = message.thread_ts
    if kind == "message":
        event["channel_type"] = "channel"
    return event


@dataclass
class Asked:
    """An approval request as seen: its buttons may be replaced while someone decides."""

    message: Message
    call_id: str
    version: int
    value: str  # the buttons' value (Approve and Reject carry the same)
    blocks: str  # JSON of the blocks when seen


def _button_value(message: Message) -> str | None:
    for block in message.blocks or []:
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("action_id") == APPROVE:
                return str(element["value"])
    return None
