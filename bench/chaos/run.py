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

from bench.chaos.admin_home import StaleHomeDiscards
from bench.chaos.classify import approval_buttons
from bench.chaos.facts import KeyedLog, Violation
from bench.chaos.faults import Cluster, Injector, Targets
from bench.chaos.gather import gather_facts, record_facts
from bench.chaos.invariants import check
from bench.chaos.model import ModelServer
from bench.chaos.people import People, ThreadState
from bench.chaos.plan import RunPlan
from bench.chaos.processes import OAUTH, ONE_WORKSPACE
from bench.chaos.resume_at_cap import ResumesAtCap
from bench.chaos.shape_checks import exercised
from bench.chaos.slack import TEAM, Deliverer, SlackSide
from bench.chaos.stoppers import Stoppers
from bench.chaos.targets import RunTargets
from bench.chaos.unsigned import UnsignedRequests
from bench.chaos.workspaces import Installer, SecondWorkspace
from bench.common import answers_healthz
from storage import ConversationKey, Status, Store

QUIET_SECONDS = 3.0  # > the lease: a recovery sweep would have shown itself
QUIET_TIMEOUT = 45.0


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
    exercised: dict[str, int] = field(default_factory=dict)  # of issue 49's shapes


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
        self.threads = [ThreadState(t) for t in plan.threads]
        targets = RunTargets(
            plan=plan,
            deliverer=self.deliverer,
            slack=slack,
            model=model,
            cluster=cluster,
            store=store,
            threads=self.threads,
            keyed=self.keyed,
        )
        self.injector = injector_factory(self.note, targets)
        self.people = People(slack.api, self.deliverer, self.note)
        self.stoppers = Stoppers(self.people, self.threads, plan.seed, slack)
        self.home = StaleHomeDiscards(self.people, slack, store)
        self.unsigned = UnsignedRequests(
            plan.seed, cluster, self.deliverer, self.threads, self.note
        )
        self.resumes = ResumesAtCap(self.people, slack, model.given)
        self.installer = Installer(slack, cluster, self.note)
        self.workspace = (
            SecondWorkspace(
                plan.seed,
                plan.uninstall,
                slack=slack,
                deliverer=self.deliverer,
                installer=self.installer,
                note=self.note,
            )
            if plan.uninstall is not None
            else None
        )
        self.longest_outage = 0.0  # seconds with no replica serving, at most
        self.not_quiet_because = ""  # what kept the run from quiet last (its history says)
        self.stop_deciding = asyncio.Event()

    def note(self, what: str, /, **data: Any) -> None:
        self.events.append({"t": round(time.monotonic() - self.started, 3), "type": what, **data})

    # -- the run ------------------------------------------------------------------------

    async def execute(self) -> RunResult:
        plan = self.plan
        self.note("plan", **plan.describe())
        ttl = "1h" if plan.state_ttl is None else f"{plan.state_ttl}s"
        # A run with an uninstall serves many workspaces (OAuth), this one installed first.
        mode = OAUTH if plan.uninstall is not None else ONE_WORKSPACE
        # `/resume` at the run cap: a small cap, and a model call not retried (a failed one
        # interrupts its run).
        capped = plan.resume_at_cap
        cap: dict[str, str | None] = {
            "BOT_MAX_RUNS": str(capped.max_runs) if capped else None,
            "BOT_MODEL_RETRIES": "0" if capped else None,
        }
        await self.cluster.configure({"BOT_STATE_TTL": ttl, **mode, **cap})
        await self.cluster.ensure(plan.replicas)
        if plan.uninstall is not None and TEAM not in self.cluster.installed:
            if not await self.installer.install(TEAM):
                return self._not_run("the run's workspace could not be installed")
            self.cluster.installed.add(TEAM)
        posts_from = len(self.slack.posts)
        self.leaks_from = len(self.slack.leaks)
        self.model_from = len(self.model.log)
        attempts_from = len(self.slack.attempts)
        self.model.given.clear()  # (the same seed ran on the other backend before)
        self.model.revealed.clear()
        self.model.flaked.clear()
        self.started = time.monotonic()
        self.wall_started = time.time()
        self.note("start", replicas=plan.replicas)
        stop_deciding = self.stop_deciding
        self.model.watchers.append(self.stoppers.watch_model)
        actors = [asyncio.create_task(self.people.actor(t)) for t in self.threads]
        deciders = [
            asyncio.create_task(self.people.decider(t, stop_deciding)) for t in self.threads
        ]
        deciders += [
            asyncio.create_task(self.stoppers.stopper(t, stop, stop_deciding))
            for t in self.threads
            for stop in t.plan.stops
        ]
        deciders += [
            asyncio.create_task(
                self.stoppers.discarder(t, t.plan.discard_after_approval, stop_deciding)
            )
            for t in self.threads
            if t.plan.discard_after_approval is not None
        ]
        # Issue 49's shapes (`bench.chaos.shapes`).
        deciders += [
            asyncio.create_task(self.stoppers.redeliver(self.threads[r.thread], r, stop_deciding))
            for r in plan.redelivered_stops
        ]
        deciders += [
            asyncio.create_task(self.home.discard(self.threads[h.thread], h, stop_deciding))
            for h in plan.home_discards
        ]
        deciders.append(asyncio.create_task(self.unsigned.play(plan.unsigned, self.started)))
        if capped is not None:
            deciders.append(
                asyncio.create_task(
                    self.resumes.play(
                        self.threads[capped.thread],
                        self.threads[capped.holder],
                        capped,
                        stop_deciding,
                    )
                )
            )
        if self.workspace is not None:
            deciders.append(asyncio.create_task(self.workspace.play(stop_deciding)))
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
            if quiet:
                self.note("quiet", seconds=round(quiet_seconds, 2))
            else:
                self.note("not_quiet", seconds=round(quiet_seconds, 2), why=self.not_quiet_because)
            self.note("longest_outage", seconds=round(self.longest_outage, 2))
        except Exception as exc:
            error = repr(exc)
            self.note("harness_error", error=error)
        finally:
            stop_deciding.set()
            self.model.watchers.remove(self.stoppers.watch_model)
            for task in [*actors, *deciders, faults, outages]:
                task.cancel()
            for task in [*actors, *deciders, faults, outages, *self.people.deliveries]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        violations: list[Violation] = []
        happened: dict[str, int] = {}
        try:
            facts = await gather_facts(self, posts_from)
            violations = check(facts)
            happened = exercised(facts)
            self.note("exercised", **happened)
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
            undelivered=sum(1 for m in self.people.sent if not m.acked and not m.decision),
            error=error,
            discards=plan.discards,
            workloads=plan.workloads,
            exercised=happened,
        )

    def _not_run(self, error: str) -> RunResult:
        self.note("harness_error", error=error)
        self._write_history()
        plan = self.plan
        return RunResult(
            seed=plan.seed,
            backend=plan.backend,
            replicas=plan.replicas,
            fault_kinds=plan.fault_kinds,
            violations=[],
            seconds=time.monotonic() - self.started,
            quiet_seconds=0.0,
            quiet=False,
            history=str(self.history_path),
            error=error,
            discards=plan.discards,
            workloads=plan.workloads,
        )

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
            if await answers_healthz(http, replica.url):
                return True
        return False

    # -- quiet --------------------------------------------------------------------------

    async def _wait_quiet(self, within: float) -> bool:
        """Quiet: no delivery in flight, no model request and no Slack call (other than to a
        permanently failing channel) for QUIET_SECONDS, no thread of this run `running`.
        What kept it from quiet last is kept in `not_quiet_because` for the history."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            await asyncio.sleep(0.25)
            because = await self._not_quiet_because(time.monotonic())
            if because is None:
                return True
            self.not_quiet_because = because
        return False

    async def _not_quiet_because(self, now: float) -> str | None:
        if self.deliverer.pending:
            return f"deliveries pending: {self.deliverer.pending}"
        if self.model.in_flight:
            return f"model requests in flight: {self.model.in_flight}"
        if now - self.model.last_request < QUIET_SECONDS:
            return "a model request lately"
        if now - self._last_live_call() < QUIET_SECONDS:
            latest = self.slack.attempts[-1] if self.slack.attempts else {}
            return f"a Slack call lately: {latest.get('method')} to {latest.get('channel')}"
        if self.people.deciding:
            return f"people deciding: {self.people.deciding}"
        if self._undecided():
            return "buttons nobody acted on"
        if self.unsigned.busy:
            return "unsigned requests busy"
        if self.workspace is not None and self.workspace.busy:
            return "second workspace busy"
        return await asyncio.to_thread(self._running_because)

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

    def _running_because(self) -> str | None:
        # Threads in a permanently failing channel count too: the bot must end them (give
        # up the delivery, release), and a recovery may take a dead replica's lease over
        # only after the quiet window's Slack calls (to that channel alone) were ignored.
        keys = [thread.key for thread in self.threads if thread.key is not None]
        if self.workspace is not None:
            keys += self.workspace.keys()
            if self.store.pending_removals():  # its conversations are being discarded
                return "a workspace's removal pending"
        for key in keys:
            record = self.store.get(key)
            if record is not None and record.status is Status.RUNNING:
                return f"{key} running"
        return None

    def _write_history(self) -> None:
        self.history_path.parent.mkdir(parents=True, exist_ok=True)
        with self.history_path.open("w") as handle:
            for event in self.events:
                handle.write(json.dumps(event, default=str) + "\n")
