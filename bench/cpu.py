"""CPU per answer against the plain bot (issue 28): the bot a user would write from Slack's
template (`bench.plain_bot`: bolt `AsyncApp`, `Runner.run`, `SQLiteSession`, one `say()`)
beside ours (`python -m bot serve`) on the local and the aws backend, as real processes, on
the same Slack stand-in and the same scripted `/v1/responses` model (`bench.responses_agent`).

Each bot is warmed, then fed mentions one after another (each answered before the next);
its process CPU (user + system, every thread, from /proc) is read around each batch. Plain
mentions are answered in one model turn; `lookup` mentions in a model turn that calls the
tool and a second that answers (a model+tool turn). Batches are interleaved over rounds, so
that the machine's drift falls on every bot alike; ratios are of figures from this run. All
the mention batches come before all the tool batches: a garbage collection runs when enough
has been allocated, not when a batch ends, so with kinds alternating, collections that one
kind's garbage caused were counted in the other's batches. The plain bot, which does not
freeze its start-up objects out of the collector as ours does, showed it most: 6.8 ms per
mention and 14.3 ms per tool turn alternating, 7.8 ms and 13.2 ms one kind at a time.

Then the same bots run again under `bench.profiled` (cProfile by thread CPU time) for one
batch of each kind, and their CPU is split by component (the package or our module group of
each function's own time; a built-in's time goes to its caller's), scaled to the CPU the
bots spend unprofiled. Then recovery: the replica CPU per conversation resumed
(`bench.recovery`). Last, the floor under a plain answer: what ours must add to the plain
bot's work, each part measured alone (`bench.floors`).

`--before REV` (a before/after comparison across a change, in one run): REV is checked out
into a temporary detached git worktree (removed afterwards, even on failure), and ours started
from it (the same `python -m bot serve`, the same environment, its own cwd and PYTHONPATH,
its own aws table and bucket) joins the interleaved batches on both backends as
"ours @REV, local/aws". A last table gives, per backend, its CPU per answer and per
model+tool turn beside ours now and the ratio now / then. It is neither profiled nor in the
recovery or floors parts, which measure the current code only."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bots import ROOT, Bot, Sender, answers, bot_env, slack_standin
from bench.common import section, table
from bench.emulators import Emulators
from bench.floors import measure_floors, report_floors
from bench.recovery import recovery_rate
from bench.responses_agent import model_server
from bot.standin.slack_api import SlackWebApi
from storage.local import LocalStore

TARGETS = {"ours, local": 1.25, "ours, aws": 1.5}
RECOVERY_TARGET_MS = 4.0
TICKS = os.sysconf("SC_CLK_TCK")
KINDS = ("mention", "tool")  # a plain answer; a model+tool turn
BACKENDS = ("local", "aws")


@dataclass
class Measured:
    name: str
    bot: Bot
    cpu: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))
    count: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))

    def per(self, kind: str) -> float:
        """CPU ms per answer of this kind."""
        return self.cpu[kind] * 1000 / max(self.count[kind], 1)


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def text_of(kind: str, n: int) -> str:
    tag = uuid.uuid4().hex[:6]
    return f"lookup topic {tag} {n}" if kind == "tool" else f"hello there {tag} {n}"


async def answer_each(api: SlackWebApi, sender: Sender, bot: Bot, kind: str, count: int) -> None:
    """`count` mentions in new threads, each answered before the next is sent."""
    for n in range(count):
        since = len(api.calls)
        ts, _ = await sender.mention(bot, text_of(kind, n))

        def answered(ts: str = ts, since: int = since) -> bool:
            return any(a.thread_ts == ts for a in answers(api, since))

        await api.wait_for(answered, within=60)
    await asyncio.sleep(0.05)  # the calls after the answer (status cleared, released)


@dataclass(frozen=True)
class Before:
    """Ours at an earlier revision, checked out at `tree`, measured beside ours."""

    rev: str  # short hash
    tree: Path

    def name(self, backend: str) -> str:
        return f"ours @{self.rev}, {backend}"


@contextmanager
def checked_out(rev: str) -> Iterator[Before]:
    """`rev` in a temporary detached git worktree, removed afterwards even on failure."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout.strip()

    short = git("rev-parse", "--short", f"{rev}^{{commit}}")
    with tempfile.TemporaryDirectory(prefix="bench-before-") as tmp:
        tree = Path(tmp) / "tree"
        git("worktree", "add", "--detach", str(tree), short)
        try:
            if (ROOT / "node_modules").exists():  # DynamoDB Local's, as in our own tree
                (tree / "node_modules").symlink_to((ROOT / "node_modules").resolve())
            yield Before(short, tree)
        finally:
            git("worktree", "remove", "--force", str(tree))


def bots(
    api_url: str,
    model_url: str,
    data: Path,
    aws: dict[str, str],
    profile: Path | None,
    before: tuple[Before, dict[str, str]] | None = None,
) -> list[tuple[str, Bot]]:
    """The plain bot and ours on each backend; with `before` (and its aws storage), ours at
    that revision too, with the same environment but its own code (cwd and PYTHONPATH)."""
    common = {"BENCH_RESPONSES_URL": model_url}
    ours = "bench.responses_agent:build_durable_agent"
    made = []
    specs: list[tuple[str, str, dict[str, str], str, Path]] = [
        ("plain bot", "bench.plain_bot", {"BOT_DATA_DIR": str(data / "plain")}, "", ROOT),
        (
            "ours, local",
            "bot",
            {"BOT_STORAGE": "local", "BOT_DATA_DIR": str(data / "local")},
            ours,
            ROOT,
        ),
        ("ours, aws", "bot", aws, ours, ROOT),
    ]
    if before is not None:
        earlier, earlier_aws = before
        local = {"BOT_STORAGE": "local", "BOT_DATA_DIR": str(data / "before-local")}
        specs += [
            (earlier.name("local"), "bot", local, ours, earlier.tree),
            (earlier.name("aws"), "bot", earlier_aws, ours, earlier.tree),
        ]
    for name, module, storage, agent, tree in specs:
        env = bot_env(api_url, storage, **common)
        if agent:
            env["BOT_AGENT"] = agent
        if tree != ROOT:
            env["PYTHONPATH"] = str(tree)
        argv: tuple[str, ...] = () if module == "bench.plain_bot" else ("serve",)
        if profile is not None:
            slug = name.replace(", ", "-").replace(" ", "-")
            env["BENCH_PROFILE"] = str(profile / slug)
            argv, module = (module, *argv), "bench.profiled"
        made.append((name, Bot(env, data / f"{name}.log", module=module, argv=argv, cwd=tree)))
    return made


async def run_bots(
    emulators: Emulators,
    mentions: int,
    tools: int,
    rounds: int,
    profile: Path | None,
    before: Before | None = None,
) -> tuple[list[Measured], dict[str, dict[str, list[list[Any]]]]]:
    """Measured CPU per bot (unprofiled when `profile` is None) and, when profiling, each
    bot's profile rows per kind. With `before`, ours at that revision is among the bots."""
    aws = emulators.bot_storage("cpu")
    earlier = None if before is None else (before, emulators.bot_storage("cpu-before"))
    profiles: dict[str, dict[str, list[list[Any]]]] = {}
    with tempfile.TemporaryDirectory() as tmp, model_server() as model_url:
        async with slack_standin() as (api, api_url):
            made = [
                Measured(name, bot)
                for name, bot in bots(api_url, model_url, Path(tmp), aws, profile, earlier)
            ]
            for m in made:
                m.bot.start()
            sender = Sender(api)
            try:
                for m in made:
                    await m.bot.wait_healthy()
                for m in made:  # first-use work (imports, clients, the JIT of the emulators)
                    await answer_each(api, sender, m.bot, "mention", 10)
                    await answer_each(api, sender, m.bot, "tool", 5)
                # One kind at a time: the collector's work that a kind's garbage causes
                # then falls in that kind's batches (see the module's docstring).
                for kind, count in (("mention", mentions), ("tool", tools)):
                    for _ in range(rounds):
                        for m in made:
                            pid = m.bot.process.pid  # type: ignore[union-attr]
                            if profile is not None:
                                os.kill(pid, signal.SIGUSR1)
                            started = process_cpu(pid)
                            await answer_each(api, sender, m.bot, kind, count)
                            m.cpu[kind] += process_cpu(pid) - started
                            m.count[kind] += count
                            if profile is not None:
                                os.kill(pid, signal.SIGUSR2)
                                written = profile / (
                                    f"{m.bot.env['BENCH_PROFILE'].rsplit('/', 1)[1]}."
                                    f"{1 + len(profiles.get(m.name, {}))}"
                                )
                                await wait_file(written)
                                profiles.setdefault(m.name, {})[kind] = json.loads(
                                    written.read_text()
                                )
            finally:
                await sender.close()
                for m in made:
                    await m.bot.stop()
    return made, profiles


async def wait_file(path: Path, within: float = 30) -> None:
    for _ in range(int(within / 0.05)):
        if await asyncio.to_thread(path.exists):  # renamed into place once written
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no profile at {path}")


def _keep_rows(keep: Path, profiles: dict[str, dict[str, list[list[Any]]]]) -> None:
    keep.mkdir(parents=True, exist_ok=True)
    for name, kinds in profiles.items():
        for kind, rows in kinds.items():
            (keep / f"{name.replace(', ', '-')}.{kind}.json").write_text(json.dumps(rows))


# Components, by the path of a function's file (first match); our own code by module group.
COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("bolt / slack_sdk", ("slack_bolt/", "slack_sdk/")),
    ("botocore / boto3 / urllib3", ("botocore/", "boto3/", "s3transfer/", "urllib3/")),
    ("agents SDK", ("/agents/",)),
    ("openai / httpx", ("openai/", "httpx/", "httpcore/", "anyio/", "h11/", "sniffio/")),
    ("pydantic", ("pydantic", "typing_extensions", "typing_inspection")),
    ("aiohttp", ("aiohttp/", "multidict/", "yarl/", "propcache/", "frozenlist/")),
    ("json", ("/json/",)),
    ("sqlite3", ("sqlite3",)),
    ("asyncio / selectors / sockets", ("asyncio/", "selectors", "socket", "ssl")),
    ("threads (executor hand-offs)", ("threading.py", "concurrent/", "queue.py")),
    ("http.client / email / urllib", ("http/", "email/", "urllib/")),
    ("logging", ("logging/",)),
    ("storage (ours)", ("wt:storage/",)),
    ("bot.runtime (ours)", ("wt:bot/runtime/",)),
    ("bot.slackapp, the rest of ours", ("wt:bot/", "wt:bench/")),
)
BUILTIN_COMPONENTS: tuple[
    tuple[str, tuple[str, ...]], ...
] = (  # a built-in's own time, by its name, before its caller's
    ("sqlite3", ("sqlite3",)),
    ("json", ("_json",)),
    ("pydantic", ("pydantic_core",)),
    ("asyncio / selectors / sockets", ("select.", "_socket", "_ssl", "socket")),
    ("threads (executor hand-offs)", ("_thread.", "lock", "_queue")),
)


PROFILER = ("cProfile.py", "bench/profiled.py")


def component(file: str, name: str, caller: str) -> str:
    if file == "~":
        for group, marks in BUILTIN_COMPONENTS:
            if any(mark in name for mark in marks):
                return group
        file = caller
    root = str(ROOT) + "/"
    if file.startswith(root) and "site-packages" not in file:
        file = "wt:" + file[len(root) :]
    for group, marks in COMPONENTS:
        if any(mark in file for mark in marks):
            return group
    return "other (stdlib, built-ins)"


def by_component(rows: list[list[Any]]) -> dict[str, float]:
    """Own CPU seconds per component."""
    totals: dict[str, float] = {}
    for file, _line, name, caller, _calls, own in rows:
        if any(mark in f for f in (file, caller) for mark in PROFILER):
            continue  # the profiler's own reading of its counters
        group = component(file, name, caller)
        totals[group] = totals.get(group, 0.0) + own
    return totals


async def run_cpu(
    emulators: Emulators,
    mentions: int = 60,
    tools: int = 30,
    rounds: int = 2,
    before: Before | None = None,
) -> dict[str, Any]:
    """With `before`, ours at that revision is measured in the interleaved batches too (not
    profiled: its figures are only compared with ours)."""
    everyone, _ = await run_bots(emulators, mentions, tools, rounds, None, before)
    earlier = set() if before is None else {before.name(b) for b in BACKENDS}
    measured = [m for m in everyone if m.name not in earlier]
    with tempfile.TemporaryDirectory() as tmp:
        profiled, profiles = await run_bots(emulators, mentions, tools, 1, Path(tmp))
    keep = os.getenv("BENCH_PROFILE_KEEP")  # a directory for each bot's raw rows
    if keep:
        await asyncio.to_thread(_keep_rows, Path(keep), profiles)
    recovery: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalStore(Path(tmp))
        recovery["local"] = 1000 / (await recovery_rate(local, 300))[3]
        local.close()
    aws = emulators.store("cpu-recovery")
    recovery["aws"] = 1000 / (await recovery_rate(aws, 300))[3]
    aws.close()
    with model_server() as model_url:
        floors = await measure_floors(emulators, model_url)
    results: dict[str, Any] = {
        "floors": floors,
        "measured": {m.name: {k: m.per(k) for k in KINDS} for m in measured},
        "counts": {m.name: m.count for m in measured},
        "profiled_cpu": {m.name: {k: m.per(k) for k in KINDS} for m in profiled},
        "components": {
            name: {kind: by_component(rows) for kind, rows in kinds.items()}
            for name, kinds in profiles.items()
        },
        "profiled_counts": {m.name: m.count for m in profiled},
        "recovery_ms": recovery,
    }
    if before is not None:
        results["before"] = {
            "rev": before.rev,
            "measured": {
                backend: {k: m.per(k) for k in KINDS}
                for m in everyone
                for backend in BACKENDS
                if m.name == before.name(backend)
            },
            "counts": {m.name: m.count for m in everyone if m.name in earlier},
        }
    return results


def report(results: dict[str, Any]) -> dict[str, Any]:
    measured = results["measured"]
    plain = measured["plain bot"]
    counts = results["counts"]["plain bot"]
    section(
        "CPU per answer against the plain bot (bolt AsyncApp + Runner.run + SQLiteSession)",
        f"Real processes on the same Slack stand-in and scripted `/v1/responses` model; "
        f"process CPU from /proc over {counts['mention']} plain answers and "
        f"{counts['tool']} model+tool turns each (new threads, one at a time, after a "
        "warm-up; the bots' batches interleaved, all mentions before all tool turns). "
        "Ours streams its answer and keeps every turn; the "
        "plain bot posts once and keeps nothing durable.",
    )
    rows = []
    for name, per in measured.items():
        target = TARGETS.get(name)
        cells: list[object] = [name]
        for kind in KINDS:
            ratio = per[kind] / plain[kind]
            cells += [f"{per[kind]:.1f}", f"{ratio:.2f}x"]
        if target is None:
            cells.append("—")
        else:
            met = all(per[k] / plain[k] <= target for k in KINDS)
            cells.append(f"≤ {target:.2f}x: {'met' if met else 'not met'}")
        rows.append(cells)
    print(
        table(
            [
                "bot",
                "CPU ms per answer",
                "vs plain",
                "CPU ms per model+tool turn",
                "vs plain",
                "target",
            ],
            rows,
            "lrrrrl",
        ),
        flush=True,
    )
    recovery = results["recovery_ms"]
    print(
        "\nRecovery: replica CPU per conversation resumed (300 each, one model turn, commit, "
        "release): "
        + ", ".join(
            f"{backend} {value:.1f} ms ({'met' if value <= RECOVERY_TARGET_MS else 'not met'}, "
            f"≤ {RECOVERY_TARGET_MS:.0f} ms)"
            for backend, value in recovery.items()
        ),
        flush=True,
    )
    for kind, title, unit in (
        ("mention", "a plain answer", "answer"),
        ("tool", "a model+tool turn", "turn"),
    ):
        section(
            f"Where the CPU of {title} goes, by component (ms per {unit})",
            "Own CPU time of each function under cProfile (every thread, by thread CPU "
            "time; a built-in's time goes to its caller's component), scaled so that each "
            "bot's column sums to its unprofiled CPU above. The last column is ours on aws "
            "less the plain bot. cProfile charges every Python call alike, so code made of "
            "many small calls (botocore's, pydantic's Python side) looks dearer than it is; "
            "system time (the loopback sockets) shows as the socket and HTTP components.",
        )
        names = list(results["components"])
        scaled: dict[str, dict[str, float]] = {}
        for name in names:
            groups = results["components"][name][kind]
            total = sum(groups.values()) or 1.0
            scale = measured[name][kind] / total
            scaled[name] = {g: v * scale for g, v in groups.items()}
        every = sorted(
            {g for s in scaled.values() for g in s},
            key=lambda g: -scaled.get("ours, aws", {}).get(g, 0.0),
        )
        table_rows = []
        for group in every:
            values = [scaled[n].get(group, 0.0) for n in names]
            extra = scaled.get("ours, aws", {}).get(group, 0.0) - scaled.get("plain bot", {}).get(
                group, 0.0
            )
            table_rows.append([group, *(f"{v:.2f}" for v in values), f"{extra:+.2f}"])
        table_rows.append(
            [
                "total",
                *(f"{measured[n][kind]:.2f}" for n in names),
                f"{measured['ours, aws'][kind] - plain[kind]:+.2f}",
            ]
        )
        print(
            table(["component", *names, "aws - plain"], table_rows, "l" + "r" * (len(names) + 1)),
            flush=True,
        )
    report_floors(
        results["floors"],
        plain["mention"],
        {backend: measured[f"ours, {backend}"]["mention"] for backend in BACKENDS},
        {backend: TARGETS[f"ours, {backend}"] for backend in BACKENDS},
    )
    summary = {"cpu_ms": measured, "recovery_cpu_ms": recovery, "floors": results["floors"]}
    if "before" in results:
        summary["before"] = report_before(results["before"], measured)
    return summary


def report_before(before: dict[str, Any], measured: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Ours now against ours at the earlier revision, both from this run's batches."""
    rev = before["rev"]
    section(
        f"CPU per answer: ours now against ours @{rev}",
        f"Ours at {rev} (a detached worktree of that revision, the same command and "
        "environment) was one more bot in the interleaved batches above, so both figures "
        "come from this run; the ratio is now / then.",
    )
    rows = []
    ratios: dict[str, dict[str, float]] = {}
    for backend in BACKENDS:
        then, now = before["measured"][backend], measured[f"ours, {backend}"]
        ratios[backend] = {k: now[k] / then[k] for k in KINDS}
        cells: list[object] = [backend]
        for kind in KINDS:
            cells += [f"{then[kind]:.1f}", f"{now[kind]:.1f}", f"{ratios[backend][kind]:.2f}x"]
        rows.append(cells)
    print(
        table(
            [
                "backend",
                f"ms per answer @{rev}",
                "now",
                "now / then",
                f"ms per model+tool turn @{rev}",
                "now",
                "now / then",
            ],
            rows,
            "lrrrrrr",
        ),
        flush=True,
    )
    return {"rev": rev, "cpu_ms": before["measured"], "ratio": ratios}
