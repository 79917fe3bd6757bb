"""Restart to resume: a real `python -m bot serve` is killed with SIGKILL in the middle of a
run (its first turn, a tool call, is committed, with a checkpoint after every turn; the
model is still working on the answer),
and the thread's answer comes from the next process.

- Same host: the process is started again. It proves its predecessor dead (the lease holder
  names this host, boot, pid and start time) and takes the thread over at once: measured
  from the new process answering /healthz to the resumed answer being posted.
- Another host: a second process already runs on the same storage (`bench.other_host`,
  which reports another host name). It can prove nothing; the dead replica's heartbeat
  stops, and the other takes the thread over (fenced) once that beat is older than 4 s,
  well before the lease (default `BOT_LEASE_SECONDS`) would lapse: measured from the kill to
  the takeover (the thread's lease named by the other replica) and to the resumed answer.
  `python -m bench takeover` runs this part alone."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bots import Bot, Sender, answers, bot_env, slack_standin
from bench.common import section, table
from bench.emulators import Emulators
from storage import ConversationKey, StorageSettings, Store, open_store
from testkit.slack import CHANNEL, TEAM

SLOW_ANSWER = "60"  # the first process's answer never comes: it is killed first
# A checkpoint after every turn (the default leaves a harmless tool turn to the answer's
# checkpoint), so that the run is caught with its first turn committed.
EVERY_TURN = {"BOT_CHECKPOINT_INTERVAL": "0"}
BETWEEN_TURNS = {"BENCH_ANSWER_DELAY": SLOW_ANSWER, **EVERY_TURN}


def _store_of(storage: dict[str, str]) -> Store:
    """The store a bot process with these `BOT_*` variables opens."""
    values = {k.removeprefix("BOT_").lower(): v for k, v in storage.items() if k.startswith("BOT_")}
    return open_store(StorageSettings.model_validate(values))


async def _committed_first_turn(storage: dict[str, str], key: ConversationKey) -> None:
    store = _store_of(storage)
    try:
        for _ in range(1000):
            record = await asyncio.to_thread(store.get, key)
            if record is not None and record.checkpoint_version >= 1:
                return
            await asyncio.sleep(0.02)
        raise TimeoutError("the first turn was never committed")
    finally:
        store.close()


async def _taken_over(storage: dict[str, str], key: ConversationKey, dead: str) -> float:
    """When the thread's lease stopped naming `dead` (its owner prefix): the takeover."""
    store = _store_of(storage)
    try:
        for _ in range(6000):
            record = await asyncio.to_thread(store.get, key)
            owner = record.lease_owner if record is not None else None
            if owner and not owner.startswith(dead):
                return time.time()
            await asyncio.sleep(0.02)
        raise TimeoutError("never taken over")
    finally:
        store.close()


async def _answer_time(api: Any, ts: str, within: float = 120) -> float:
    found = await api.wait_for(
        lambda: [a for a in answers(api) if a.thread_ts == ts], within=within
    )
    return float(found[0].at)


async def same_host(storage: dict[str, str], logs: Path) -> dict[str, float]:
    async with slack_standin() as (api, api_url):
        first = Bot(bot_env(api_url, storage, **BETWEEN_TURNS), logs / "a.log")
        first.start()
        await first.wait_healthy()
        sender = Sender(api)
        ts, _ = await sender.mention(first, "lookup the restart")
        await _committed_first_turn(
            storage, ConversationKey(team=TEAM, channel=CHANNEL, thread_ts=ts)
        )
        first.kill()
        second = Bot(bot_env(api_url, storage, **EVERY_TURN), logs / "b.log", port=first.port)
        second.start()
        wall_started = time.time()
        startup = await second.wait_healthy()
        wall_healthy = wall_started + startup
        answered = await _answer_time(api, ts)
        await sender.close()
        await second.stop()
    return {
        "startup_s": startup,
        "healthy_to_answer_s": answered - wall_healthy,
        "start_to_answer_s": answered - wall_started,
    }


async def other_host(storage: dict[str, str], logs: Path) -> dict[str, float]:
    async with slack_standin() as (api, api_url):
        first = Bot(bot_env(api_url, storage, **BETWEEN_TURNS), logs / "c.log")
        other = Bot(
            bot_env(api_url, storage, **EVERY_TURN), logs / "d.log", module="bench.other_host"
        )
        first.start()
        other.start()
        await first.wait_healthy()
        await other.wait_healthy()
        sender = Sender(api)
        ts, _ = await sender.mention(first, "lookup the failover")
        key = ConversationKey(team=TEAM, channel=CHANNEL, thread_ts=ts)
        await _committed_first_turn(storage, key)
        assert first.process is not None
        dead = f"|{first.process.pid}|"
        first.kill()
        killed = time.time()
        taken, answered = await asyncio.gather(
            _taken_over(storage, key, _owner_prefix(storage, key, dead)),
            _answer_time(api, ts, within=180),
        )
        await sender.close()
        await other.stop()
    lease = float(
        storage.get("BOT_LEASE_SECONDS", StorageSettings.model_fields["lease_seconds"].default)
    )
    return {
        "kill_to_takeover_s": taken - killed,
        "kill_to_answer_s": answered - killed,
        "lease_s": lease,
    }


def _owner_prefix(storage: dict[str, str], key: ConversationKey, pid: str) -> str:
    """The dead replica's identity, as its lease names it (up to its pid's field)."""
    store = _store_of(storage)
    try:
        record = store.get(key)
        owner = (record.lease_owner if record is not None else None) or ""
        return owner.split(pid, 1)[0] + pid if pid in owner else owner
    finally:
        store.close()


async def run_restart(emulators: Emulators) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        for backend in ("local", "aws"):
            if backend == "aws":
                storage = emulators.bot_storage("restart")
            else:
                storage = {"BOT_STORAGE": "local", "BOT_DATA_DIR": str(logs / "data")}
            out[backend] = {
                "same host": await same_host(storage, logs),
                "other host": await other_host(storage, logs),
            }
    return out


def report(results: dict[str, Any]) -> dict[str, Any]:
    section(
        "Restart to resume: a bot process SIGKILLed mid-run",
        "The run's first turn (a tool call) is committed, the answer is not. Same host: the "
        "process is started again and takes the thread over at once (it proves its "
        "predecessor dead). Another host: a second replica on the same storage takes the "
        "thread over once the dead one's heartbeat has been silent for 4 s (its next beat "
        "sweeps at once), fenced, and resumes it.",
    )
    rows = []
    for backend, found in results.items():
        same, other = found["same host"], found["other host"]
        rows.append(
            [
                backend,
                f"{same['startup_s']:.2f}",
                f"{same['healthy_to_answer_s']:.2f}",
                f"{same['start_to_answer_s']:.2f}",
                f"{other['kill_to_takeover_s']:.1f}",
                f"{other['kill_to_answer_s']:.1f} (lease {other['lease_s']:.0f} s)",
            ]
        )
    print(
        table(
            [
                "backend",
                "same host: start → healthy, s",
                "healthy → resumed answer, s",
                "start → resumed answer, s",
                "other host: kill → takeover, s",
                "kill → resumed answer, s",
            ],
            rows,
        )
    )
    return results


async def run_takeover(emulators: Emulators) -> dict[str, Any]:
    """The other-host part alone, on both backends."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        aws = emulators.bot_storage("takeover")
        for backend, storage in (
            ("local", {"BOT_STORAGE": "local", "BOT_DATA_DIR": str(logs / "data")}),
            ("aws", aws),
        ):
            out[backend] = await other_host(storage, logs)
    return out


def report_takeover(results: dict[str, Any]) -> dict[str, Any]:
    section(
        "Takeover from another host: a replica SIGKILLed mid-run, another (on another host) "
        "takes its thread over",
        "The dead replica's heartbeat (one write a second) stops; the other's next beat sees "
        "it older than 4 s and sweeps at once, taking the thread over fenced. Before the "
        "heartbeat, the lease decided (about a lease and a sweep interval: ~20 s).",
    )
    rows = [
        [
            backend,
            f"{found['kill_to_takeover_s']:.1f}",
            f"{found['kill_to_answer_s']:.1f}",
            f"{found['lease_s']:.0f}",
        ]
        for backend, found in results.items()
    ]
    print(table(["backend", "kill → takeover, s", "kill → resumed answer, s", "lease, s"], rows))
    return results
