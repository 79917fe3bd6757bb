"""Applying a run's faults, and healing them: processes (signals, restarts), storage (the
fault proxies for aws; a held sqlite lock or immutable blob directories for local), Slack (the
stand-in's fault layer) and the model server."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.chaos.model import ModelServer
from bench.chaos.plan import FaultPlan
from bench.chaos.processes import Replica
from bench.chaos.slack import SlackFault, SlackSide
from testkit.faultproxy import FaultProxy

STORAGE_ACTIONS = {
    "storage:throttle": "throttle",
    "storage:5xx": "error503",
    "storage:drop_before": "drop_before",
    "storage:drop_after": "drop_after",
    "storage:slow": "delay",
}


class Cluster:
    """The bot replicas of one backend: slot i listens on ports[i] for the whole soak."""

    def __init__(self, replicas: list[Replica]) -> None:
        self.replicas = replicas
        self.wanted = 1
        self.lock = asyncio.Lock()
        self.start_seconds: list[float] = []
        self.exit_seconds: list[float] = []  # waits for SIGTERMed replicas to exit
        self.installed: set[str] = set()  # workspaces installed through OAuth (storage's)

    def endpoints(self) -> list[str]:
        """Where the load balancer may send: every wanted replica whose process exists (a
        SIGSTOPped one included: a load balancer does not know)."""
        return [r.url for r in self.replicas[: self.wanted] if r.alive]

    async def start(self, replica: Replica) -> bool:
        """Start the replica unless it runs, and wait until it is healthy; one that was
        SIGTERMed is waited for first (and killed if it has not exited within 20 s: a
        shutdown that long is noted), and so is one just SIGKILLed (not yet reaped, it
        still looks alive). One that runs may still be starting (`heal` cancels a restart
        while it waits for health): it is waited for too."""
        async with self.lock:
            if replica.alive and replica.terminating:
                began = time.monotonic()
                if not await replica.wait_exit(20):
                    replica.signal(signal.SIGKILL)
                    await replica.wait_exit(5)
                self.exit_seconds.append(time.monotonic() - began)
            if replica.alive and replica.killed:
                await replica.wait_exit(5)
            if replica.alive:
                return await replica.wait_healthy()
            began = time.monotonic()
            replica.start()
            healthy = await replica.wait_healthy()
            self.start_seconds.append(time.monotonic() - began)
            return healthy

    async def ensure(self, count: int) -> None:
        """`count` replicas up and running (continued, started), the others stopped."""
        self.wanted = count
        for replica in self.replicas[count:]:
            await replica.stop()
        for replica in self.replicas[:count]:
            if replica.stopped:
                replica.signal(signal.SIGCONT)
        await asyncio.gather(*(self.start(r) for r in self.replicas[:count]))

    async def configure(self, values: dict[str, str | None]) -> None:
        """Settings for the replicas' environment (None: unset): those that run with others
        are stopped (SIGTERM), for `ensure` to start again with these."""
        changed = [
            replica
            for replica in self.replicas
            if any(replica.env.get(name) != value for name, value in values.items())
        ]
        await asyncio.gather(*(replica.stop() for replica in changed))  # each its own grace
        for replica in changed:
            for name, value in values.items():
                if value is None:
                    replica.env.pop(name, None)
                else:
                    replica.env[name] = value

    async def shutdown(self) -> None:
        await asyncio.gather(*(replica.stop() for replica in self.replicas))


class ImmutableDirs:
    """`chattr +i` on directories (creating files in them fails, even for root); every
    directory made immutable is made mutable again by `release`, also at exit."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def hold(self, root: Path) -> int:
        paths = [str(root)] + [
            os.path.join(top, name) for top, dirs, _ in os.walk(root) for name in dirs
        ]
        if subprocess.run(["chattr", "+i", *paths], capture_output=True).returncode == 0:
            if not self.paths:
                atexit.register(self.release)  # also when the soak is interrupted
            self.paths += paths
            return len(paths)
        return 0

    def release(self) -> None:
        if self.paths:
            subprocess.run(["chattr", "-i", *self.paths], capture_output=True)
            self.paths = []
            atexit.unregister(self.release)


class SqliteLock:
    """Hold the sqlite database's write lock (`BEGIN IMMEDIATE`) from another connection."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.release = threading.Event()
        self.thread: threading.Thread | None = None

    def hold(self, seconds: float) -> None:
        def run() -> None:
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            try:
                db.execute("BEGIN IMMEDIATE")
                self.release.wait(seconds)
                db.execute("ROLLBACK")
            finally:
                db.close()

        self.thread = threading.Thread(target=run, name="chaos sqlite lock", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        if self.thread is not None:
            self.thread.join(70)


class Targets(Protocol):
    """How the injector finds a replica at a chosen moment (its URL, or None)."""

    async def next_ack(self, within: float) -> str | None: ...

    async def tool_holder(self, within: float) -> str | None: ...

    async def keyed_holder(self, within: float) -> str | None: ...


@dataclass(kw_only=True, eq=False)
class Injector:
    """Applies one run's faults at their moments and heals them all at the end."""

    targets: Targets
    cluster: Cluster
    slack: SlackSide
    model: ModelServer
    proxies: dict[str, FaultProxy]
    data_dir: Path | None
    note: Callable[..., None]
    tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)
    locks: list[SqliteLock] = field(default_factory=list, init=False)
    immutable: ImmutableDirs = field(default_factory=ImmutableDirs, init=False)
    dead_channels: set[str] = field(default_factory=set, init=False)

    async def run(self, faults: list[FaultPlan], started: float) -> None:
        for fault in faults:
            await asyncio.sleep(max(0.0, started + fault.at - time.monotonic()))
            try:
                await self.apply(fault)
            except Exception as exc:  # a fault that cannot be applied is noted, not fatal
                self.note("fault_error", kind=fault.kind, error=repr(exc))

    async def apply(self, fault: FaultPlan) -> None:
        p: dict[str, Any] = fault.params
        family, _, name = fault.kind.partition(":")
        self.note("fault", kind=fault.kind, **p)
        if family == "process":
            replicas = self.cluster.replicas[: self.cluster.wanted]
            replica = replicas[min(int(p["slot"]), len(replicas) - 1)]
            moment = p.get("moment", "random")
            if moment != "random":
                find = {
                    "after_ack": self.targets.next_ack,
                    "mid_tool": self.targets.tool_holder,
                    "mid_keyed": self.targets.keyed_holder,
                }[moment]
                url = await find(5.0)
                replica = next((r for r in replicas if r.url == url), replica)
                self.note("target", moment=moment, found=url is not None, slot=replica.slot)
                await asyncio.sleep(p.get("delay", 0.0))
            if name in ("sigkill", "sigterm"):
                replica.signal(signal.SIGKILL if name == "sigkill" else signal.SIGTERM)
                self.later(p["restart_after"], lambda: self._restart(replica))
            elif name == "sigstop":
                replica.signal(signal.SIGSTOP)
                self.later(p["seconds"], lambda: self._cont(replica))
            elif name == "restart":
                replica.signal(signal.SIGTERM)
                self.later(0.0, lambda: self._restart(replica))
        elif family == "storage" and name == "sqlite_lock":
            assert self.data_dir is not None
            lock = SqliteLock(self.data_dir / "state.sqlite3")
            lock.hold(p["seconds"])
            self.locks.append(lock)
        elif family == "storage" and name == "blobs_readonly":
            assert self.data_dir is not None
            held = self.immutable.hold(self.data_dir / "blobs")
            self.note("immutable_dirs", count=held)
            self.later(p["seconds"], self._mutable)
        elif family == "storage":
            proxy = self.proxies[p["service"]]
            proxy.inject(
                STORAGE_ACTIONS[fault.kind],  # type: ignore[arg-type]
                times=p.get("times"),
                seconds=p.get("seconds"),
                probability=p["probability"],
                operation=p["operation"],
                latency=p.get("latency", 0.0),
            )
        elif family == "slack":
            self.slack.inject(_slack_fault(name, p))
            if name == "channel_error":
                self.dead_channels.add(p["channel"])
        elif family == "model":
            kind = {"500": "error500", "slow": "delay", "hang": "hang", "drop": "drop"}[name]
            self.model.inject(
                kind,  # type: ignore[arg-type]
                times=p.get("times"),
                seconds=p.get("seconds"),
                latency=p.get("latency", 0.0),
            )

    def later(self, seconds: float, action: Callable[[], Awaitable[None]]) -> None:
        async def run() -> None:
            await asyncio.sleep(seconds)
            await action()

        self.tasks.append(asyncio.create_task(run()))

    async def _restart(self, replica: Replica) -> None:
        self.note("restart", slot=replica.slot)
        await self.cluster.start(replica)

    async def _cont(self, replica: Replica) -> None:
        replica.signal(signal.SIGCONT)
        self.note("sigcont", slot=replica.slot)

    async def _mutable(self) -> None:
        self.immutable.release()
        self.note("immutable_released")

    async def heal(self, count: int) -> None:
        """Every fault off (a channel's permanent error stays until `heal_channels`), the
        pending follow-ups done, and `count` replicas up."""
        for task in self.tasks:
            if not task.done():
                task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.tasks = []
        for proxy in self.proxies.values():
            proxy.heal()
        self.model.heal()
        self.slack.heal(keep=lambda f: f.kind == "channel_error")
        for lock in self.locks:
            await asyncio.to_thread(lock.stop)
        self.locks = []
        self.immutable.release()
        await self.cluster.ensure(count)
        self.note("healed", replicas=count)

    def heal_channels(self) -> None:
        self.slack.heal()
        self.dead_channels.clear()


def _slack_fault(name: str, p: dict[str, Any]) -> SlackFault:
    methods = frozenset(p["methods"]) if p.get("methods") else None
    until = time.monotonic() + p["seconds"] if "seconds" in p else None
    if name == "429":
        return SlackFault(
            "ratelimit", methods, times=p["times"], retry_after=p["retry_after"], until=until
        )
    if name == "5xx":
        return SlackFault("error5xx", methods, times=p["times"], status=p["status"], until=until)
    if name == "channel_error":
        return SlackFault("channel_error", channel=p["channel"], error=p["error"])
    return SlackFault("slow", None, until=until, latency=p["latency"])
