"""One run: play the plan's workload against the replicas while its faults strike, heal, wait
until the system is quiet, then gather what is visible and check the invariants. Everything
that happened is written to the run's history file (JSON lines)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.chaos.classify import approval_buttons, approved, is_decision
from bench.chaos.facts import (
    SentMessage,
    StopFacts,
    Violation,
    thread_of_tag,
)
from bench.chaos.faults import Cluster, Injector, Targets
from bench.chaos.gather import gather_facts, record_facts
from bench.chaos.invariants import check
from bench.chaos.model import ModelServer
from bench.chaos.plan import ADMIN, STRANGER, Decision, RunPlan, Step, StopPlan, ThreadPlan
from bench.chaos.slack import TEAM, Deliverer, SlackSide
from bot.permalink import permalink
from bot.runtime.holder import SEPARATOR
from bot.slackapp.agent_blocks import STOP, stop_blocks
from bot.slackapp.blocks import APPROVE, REJECT
from bot.standin import requests
from bot.standin.slack_api import Message
from storage import ConversationKey, Status, Store

QUIET_SECONDS = 3.0  # > the lease: a recovery sweep would have shown itself
QUIET_TIMEOUT = 45.0
MOMENTS = ("working", "card", "approved", "finishing")  # what a stop may wait for
# Each request the keyed service got: {"key", "call_id", "at", "repeated"} (see `soak`).
KeyedLog = list[dict[str, Any]]


@dataclass
class RunResult:
    seed: int
    backend: str
    replicas: int
    fault_kinds: list[str]
    violations: list[Violation]
    seconds: float
    quiet_seconds: float
    quiet: bool
    history: str
    undelivered: int = 0
    error: str | None = None
    discards: bool = False  # the workload had an admin discard a thread
    workloads: list[str] = field(default_factory=list)  # `RunPlan.workloads`


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


class Run:
    def __init__(
        self,
        plan: RunPlan,
        *,
        slack: SlackSide,
        model: ModelServer,
        cluster: Cluster,
        injector_factory: Callable[[Callable[..., None], Targets], Injector],
        store: Store,
        ledger: Path,
        list_blobs: Callable[[ConversationKey], list[str]],
        history: Path,
        mcp_effects: Path | None = None,
        keyed: KeyedLog | None = None,
    ) -> None:
        self.plan = plan
        self.slack = slack
        self.api = slack.api
        self.model = model
        self.cluster = cluster
        self.store = store
        self.ledger = ledger
        self.mcp_effects = mcp_effects
        self.keyed = keyed if keyed is not None else []
        self.list_blobs = list_blobs
        self.history_path = history
        self.events: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self.wall_started = time.time()
        self.deliverer = Deliverer(
            cluster.endpoints, random.Random(plan.seed * 7919 + 1), slack.url
        )
        self.injector = injector_factory(self.note, self)
        self.threads = [ThreadState(t) for t in plan.threads]
        self.sent: list[SentMessage] = []
        self.stops: list[tuple[StopFacts, str | None]] = []  # and the button's token
        self.longest_outage = 0.0  # seconds with no replica serving, at most
        self.deciding = 0
        self.stop_deciding = asyncio.Event()
        self.deliveries: list[asyncio.Task[None]] = []

    def note(self, what: str, /, **data: Any) -> None:
        self.events.append({"t": round(time.monotonic() - self.started, 3), "type": what, **data})

    # -- the run ------------------------------------------------------------------------

    async def execute(self) -> RunResult:
        plan = self.plan
        self.note("plan", **plan.describe())
        ttl = "1h" if plan.state_ttl is None else f"{plan.state_ttl}s"
        await self.cluster.configure({"BOT_STATE_TTL": ttl})
        await self.cluster.ensure(plan.replicas)
        posts_from = len(self.slack.posts)
        self.model_from = len(self.model.log)
        attempts_from = len(self.slack.attempts)
        self.model.given.clear()  # (the same seed ran on the other backend before)
        self.started = time.monotonic()
        self.wall_started = time.time()
        self.note("start", replicas=plan.replicas)
        stop_deciding = self.stop_deciding
        self.model.watchers.append(self._watch_model)
        actors = [asyncio.create_task(self._actor(t)) for t in self.threads]
        deciders = [asyncio.create_task(self._decider(t, stop_deciding)) for t in self.threads]
        deciders += [
            asyncio.create_task(self._stopper(t, stop, stop_deciding))
            for t in self.threads
            for stop in t.plan.stops
        ]
        deciders += [
            asyncio.create_task(self._discarder(t, t.plan.discard_after_approval, stop_deciding))
            for t in self.threads
            if t.plan.discard_after_approval is not None
        ]
        faults = asyncio.create_task(self.injector.run(plan.faults, self.started))
        outages = asyncio.create_task(self._watch_outages(stop_deciding))
        error = None
        quiet = False
        quiet_seconds = 0.0
        try:
            await asyncio.wait_for(asyncio.gather(faults, *actors), plan.window + 30)
            await asyncio.sleep(max(0.0, self.started + plan.window - time.monotonic()))
            await self.injector.heal(plan.replicas)
            began = time.monotonic()
            # People still decide what is asked meanwhile; then nothing more may happen.
            quiet = await self._wait_quiet(QUIET_TIMEOUT)
            stop_deciding.set()
            quiet = await self._wait_quiet(10) and quiet
            quiet_seconds = time.monotonic() - began
            self.note("quiet" if quiet else "not_quiet", seconds=round(quiet_seconds, 2))
            self.note("longest_outage", seconds=round(self.longest_outage, 2))
        except Exception as exc:
            error = repr(exc)
            self.note("harness_error", error=error)
        finally:
            stop_deciding.set()
            self.model.watchers.remove(self._watch_model)
            for task in [*actors, *deciders, faults, outages]:
                task.cancel()
            for task in [*actors, *deciders, faults, outages, *self.deliveries]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        violations: list[Violation] = []
        try:
            facts = await gather_facts(self, posts_from)
            violations = check(facts)
            record_facts(self, facts, attempts_from)
        except Exception as exc:
            error = error or repr(exc)
            self.note("harness_error", error=repr(exc))
        finally:
            self.injector.heal_channels()
            await self.deliverer.close()
        for violation in violations:
            self.note("violation", **violation.__dict__)
        self._write_history()
        return RunResult(
            seed=plan.seed,
            backend=plan.backend,
            replicas=plan.replicas,
            fault_kinds=plan.fault_kinds,
            violations=violations,
            seconds=time.monotonic() - self.started,
            quiet_seconds=quiet_seconds,
            quiet=quiet,
            history=str(self.history_path),
            undelivered=sum(1 for m in self.sent if not m.acked and not m.decision),
            error=error,
            discards=plan.discards,
            workloads=plan.workloads,
        )

    # -- people -------------------------------------------------------------------------

    async def _actor(self, thread: ThreadState) -> None:
        plan = thread.plan
        for step in plan.steps:
            await asyncio.sleep(step.pause)
            if step.kind == "say" and thread.ts is None:
                message = self.api.add_user_message(
                    plan.channel, step.user, f"<@{self.api.bot_user}> {step.text}"
                )
                thread.ts = message.ts
                sent = self._sent(thread, step, message)
                event = self._event(message, "app_mention")
                delivery = await self.deliverer.event(event, step.tag)
                sent.acked = delivery.acked
                sent.acked_at = time.time()
                self.note(
                    "delivered", tag=step.tag, acked=delivery.acked, attempts=delivery.attempts
                )
                if not delivery.acked:
                    self.note("thread_abandoned", thread=plan.index, why="mention never acked")
                    return
            elif step.kind == "say":
                assert thread.ts is not None
                text = f"<@{self.api.bot_user}> {step.text}" if step.mention else step.text
                message = self.api.add_user_message(plan.channel, step.user, text, thread.ts)
                sent = self._sent(thread, step, message)
                kinds = ["message", "app_mention"] if step.mention else ["message"]
                self._deliver(sent, [self._event(message, kind) for kind in kinds])
            elif step.kind in ("resume", "discard") and thread.ts is not None:
                await self._command(thread, step)

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

    def _event(self, message: Message, kind: str) -> dict[str, Any]:
        event: dict[str, Any] = {
            "type": kind,
            "user": message.user,
            "text": message.text,
            "ts": message.ts,
            "channel": message.channel,
            "event_ts": message.ts,
            "team": TEAM,
        }
        if message.thread_ts:
            event["thread_ts"] = message.thread_ts
        if kind == "message":
            event["channel_type"] = "channel"
        return event

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

    async def _command(self, thread: ThreadState, step: Step) -> None:
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

    async def _decider(self, thread: ThreadState, stop: asyncio.Event) -> None:
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
                self.deciding += 1
                try:
                    await asyncio.sleep(decision.delay)
                    if stop.is_set():
                        return
                    await self._decide(thread, request, decision)
                except Exception as exc:  # a harness slip must not stop the deciding
                    self.note("decider_error", thread=thread.plan.index, error=repr(exc))
                finally:
                    self.deciding -= 1

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
            self._deliver(sent, [self._event(reply, "message")])
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

    # -- stops and a discard at moments of a run ----------------------------------------

    def _watch_model(self, what: str, agent: str, tags: set[str]) -> None:
        """The model was asked (`working`), or gave a final answer (`finishing`), in a
        thread of this run."""
        moment = "working" if what == "request" else "finishing"
        for tag in tags:
            index = thread_of_tag(tag)
            if tag.startswith(f"s{self.plan.seed}t") and index is not None:
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

    async def _stopper(self, thread: ThreadState, stop: StopPlan, quit: asyncio.Event) -> None:
        if not await self._at_moment(thread, stop.moment, quit):
            self.note("stop_not_sent", thread=thread.plan.index, moment=stop.moment)
            return
        self.deciding += 1
        try:
            await asyncio.sleep(stop.delay)
            if thread.ts is not None and not quit.is_set():
                await self._stop(thread, stop)
        except Exception as exc:  # a harness slip must not stop the run
            self.note("stopper_error", thread=thread.plan.index, error=repr(exc))
        finally:
            self.deciding -= 1

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
            delivery = await self.deliverer.event(self._event(reply, "message"), "stop")
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

    async def _discarder(
        self, thread: ThreadState, delay: float | None, quit: asyncio.Event
    ) -> None:
        """An admin discards the thread right after an approval, while its tool runs."""
        if delay is None or not await self._at_moment(thread, "approved", quit):
            return
        self.deciding += 1
        try:
            await asyncio.sleep(delay)
            if thread.ts is not None:
                await self._command(thread, Step("discard", 0, user=ADMIN))
        except Exception as exc:
            self.note("discarder_error", thread=thread.plan.index, error=repr(exc))
        finally:
            self.deciding -= 1

    # -- outages -------------------------------------------------------------------------

    async def _watch_outages(self, quit: asyncio.Event) -> None:
        """The longest stretch with no replica serving (each probed every half second: its
        process up, neither stopped nor shutting down, its health answered within a
        second). On this busy machine a restart can take longer than an expiry run's TTL."""
        down_since: float | None = None
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as http:
            while not quit.is_set():
                now = time.monotonic()
                if await self._serving(http):
                    down_since = None
                else:
                    down_since = now if down_since is None else down_since
                    self.longest_outage = max(self.longest_outage, now - down_since)
                await asyncio.sleep(0.5)

    async def _serving(self, http: aiohttp.ClientSession) -> bool:
        for replica in self.cluster.replicas[: self.cluster.wanted]:
            if not replica.alive or replica.stopped or replica.terminating or replica.killed:
                continue
            try:
                async with http.get(f"{replica.url}/healthz") as response:
                    if response.status == 200:
                        return True
            except (aiohttp.ClientError, TimeoutError):
                continue
        return False

    # -- fault targets -------------------------------------------------------------------

    async def next_ack(self, within: float) -> str | None:
        return await self.deliverer.next_ack(within)

    async def tool_holder(self, within: float) -> str | None:
        """The replica running an approved tool: wait for the next "approved" decision in
        this run (its card edited to say it, or a post), then find its thread's lease
        holder."""
        channels = set(self.plan.channels)
        seen = len(self.slack.posts)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            for post in self.slack.posts[seen:]:
                if post.channel in channels and is_decision(post.args) and approved(post.args):
                    key = ConversationKey(
                        team=TEAM, channel=post.channel, thread_ts=post.thread_ts or post.ts
                    )
                    return await self._holder(key)
            seen = len(self.slack.posts)
        return None

    async def keyed_holder(self, within: float) -> str | None:
        """The replica running a keyed call: wait until the keyed service applies the next
        key of this run, then find its thread's lease holder."""
        prefix = f"call_s{self.plan.seed}t"
        seen = len(self.keyed)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            for request in self.keyed[seen:]:
                call_id = str(request["call_id"])
                made = self.model.calls.get(call_id)
                if not call_id.startswith(prefix) or request["repeated"] or made is None:
                    continue
                index = thread_of_tag(made.tag)
                key = self.threads[index].key if index is not None else None
                return await self._holder(key) if key is not None else None
            seen = len(self.keyed)
        return None

    async def _holder(self, key: ConversationKey) -> str | None:
        """The URL of the replica holding the thread's lease (the owner names the pid)."""
        record = await asyncio.to_thread(self.store.get, key)
        owner = (record.lease_owner or "") if record else ""
        pid = holder_pid(owner)
        for replica in self.cluster.replicas:
            if replica.process is not None and str(replica.process.pid) == pid:
                return replica.url
        return None

    # -- quiet --------------------------------------------------------------------------

    async def _wait_quiet(self, within: float) -> bool:
        """Quiet: no delivery in flight, no model request and no Slack call (other than to a
        permanently failing channel) for QUIET_SECONDS, no thread of this run `running`."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            if self.deliverer.pending or self.model.in_flight:
                continue
            if now - self.model.last_request < QUIET_SECONDS:
                continue
            if now - self._last_live_call() < QUIET_SECONDS:
                continue
            if self.deciding or self._undecided():
                continue
            if await asyncio.to_thread(self._any_running):
                continue
            return True
        return False

    def _undecided(self) -> bool:
        """Someone would still click: the newest request for a call shows buttons nobody
        acted on yet."""
        if self.stop_deciding.is_set():
            return False
        for thread in self.threads:
            if thread.ts is None or thread.plan.channel in self.injector.dead_channels:
                continue
            newest: dict[str, int] = {}
            for message in self.api.bot_replies(thread.plan.channel, thread.ts):
                for call_id, version in approval_buttons(message.blocks):
                    newest[call_id] = max(newest.get(call_id, 0), version)
            if any((c, v) not in thread.handled for c, v in newest.items()):
                return True
        return False

    def _last_live_call(self) -> float:
        dead = self.injector.dead_channels
        for attempt in reversed(self.slack.attempts):
            if attempt.get("channel") not in dead:
                return float(attempt["mono"])
        return 0.0

    def _any_running(self) -> bool:
        # Threads in a permanently failing channel count too: the bot must end them (give
        # up the delivery, release), and a recovery may take a dead replica's lease over
        # only after the quiet window's Slack calls (to that channel alone) were ignored.
        for thread in self.threads:
            key = thread.key
            if key is None:
                continue
            record = self.store.get(key)
            if record is not None and record.status is Status.RUNNING:
                return True
        return False

    def _write_history(self) -> None:
        self.history_path.parent.mkdir(parents=True, exist_ok=True)
        with self.history_path.open("w") as handle:
            for event in self.events:
                handle.write(json.dumps(event, default=str) + "\n")


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


def holder_pid(owner: str) -> str:
    """The pid a lease owner names (`bot.runtime.holder`: host|boot|pid|ticks|suffix)."""
    parts = owner.split(SEPARATOR)
    return parts[2] if len(parts) == 5 else ""
