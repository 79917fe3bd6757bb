"""`python -m bench [NAME ...] [--turns N] [--recover N] [--load N] [--mentions N] [--rounds N]
[--before REV] [--json PATH]`

Every benchmark in one run, on one DynamoDB Local and one moto S3, started once, warmed,
and measured raw first (so that every figure has a scale). Names (default: all, in this
order): path, live, turns, growth, long, files, recovery, burst, restart, storage, load,
admission, burst500, takeover, writes, cpu, refusal. Tables are printed as markdown; the
figures also go to a JSON file (default test-artifacts/bench/results.json). `cpu --before REV`
measures ours at git revision REV beside ours now in the same batches (see `bench.cpu`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
import traceback
from pathlib import Path
from typing import Any

from bench import meter

NAMES = (
    "path",
    "live",
    "turns",
    "growth",
    "long",
    "files",
    "recovery",
    "burst",
    "restart",
    "storage",
    "load",
    "admission",
    "burst500",
    "takeover",
    "writes",
    "cpu",
    "refusal",
)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default all: {NAMES})")
    parser.add_argument("--turns", type=int, default=200, help="turns per path (turns)")
    parser.add_argument("--growth", type=int, default=500, help="turns per thread (growth)")
    parser.add_argument("--recover", type=int, default=1000, help="conversations (recovery)")
    parser.add_argument("--load", type=int, default=1000, help="conversations per step (load)")
    parser.add_argument("--mentions", type=int, default=60, help="answers per batch (cpu)")
    parser.add_argument("--rounds", type=int, default=2, help="batches per bot (cpu)")
    parser.add_argument(
        "--before",
        metavar="REV",
        help="cpu: also measure ours at this git revision (a temporary worktree), now vs then",
    )
    parser.add_argument("--json", default="test-artifacts/bench/results.json")
    args = parser.parse_args()
    unknown = [name for name in args.names if name not in NAMES]
    if unknown:
        parser.error(f"unknown benchmark {unknown}; choose from {', '.join(NAMES)}")
    chosen = args.names or list(NAMES)
    if args.before is not None and "cpu" not in chosen:
        parser.error("--before is for the cpu benchmark")
    meter.install()  # before any client exists

    from bench.common import quiet, section
    from bench.emulators import measure_raw, raw_table, running, warm

    quiet()
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}",
    }
    print(f"# Benchmarks, {results['date']} ({results['machine']})", flush=True)
    with running() as emulators:
        warmed = warm(emulators)
        measure_raw(emulators)
        section(
            "Raw latency of the emulators (DynamoDB Local, moto S3; loopback)",
            f"After a warm-up of {warmed:.0f} s. One request of each kind, interleaved, 300 "
            "of each; every other figure here was measured in the same run.",
        )
        print(raw_table(emulators), flush=True)
        results["raw_ms"] = emulators.raw_ms
        failed = []
        for name in chosen:
            try:
                results[name] = run_one(name, emulators, args)
            except Exception:  # the others' figures are still worth the run
                traceback.print_exc()
                print(f"\n(benchmark {name} failed; the others go on)", flush=True)
                results[name] = {"failed": traceback.format_exc()}
                failed.append(name)
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str))
    print(f"\n(figures written to {path})", flush=True)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


def run_one(name: str, emulators: Any, args: argparse.Namespace) -> Any:
    if name == "path":
        from bench import slack_path

        return slack_path.report(asyncio.run(slack_path.run_path(emulators)))
    if name == "live":
        from bench import live

        return live.report(asyncio.run(live.run_live(emulators)))
    if name == "turns":
        from bench import turns

        return turns.report(asyncio.run(turns.run_turns(emulators, args.turns)), emulators)
    if name == "growth":
        from bench import growth

        sides, available = asyncio.run(growth.run_growth(emulators, args.growth))
        return growth.report(sides, available)
    if name == "long":
        from bench import long_thread

        return long_thread.report(asyncio.run(long_thread.run_long_thread(emulators)))
    if name == "files":
        from bench import files

        return files.report(asyncio.run(files.run_files(emulators)))
    if name == "recovery":
        from bench import recovery

        return recovery.report(asyncio.run(recovery.run_recovery(emulators, args.recover)))
    if name == "burst":
        from bench import burst

        return burst.report(asyncio.run(burst.run_burst(emulators)))
    if name == "restart":
        from bench import restart

        return restart.report(asyncio.run(restart.run_restart(emulators)))
    if name == "storage":
        from bench import storage_ops

        return storage_ops.report(storage_ops.run_storage(emulators))
    if name == "admission":
        from bench import admission

        return admission.report(asyncio.run(admission.run_admission(emulators)))
    if name == "burst500":
        from bench import burst

        return burst.report500(asyncio.run(burst.run_burst500(emulators)))
    if name == "takeover":
        from bench import restart

        return restart.report_takeover(asyncio.run(restart.run_takeover(emulators)))
    if name == "writes":
        from bench import admission

        return admission.report_writes(asyncio.run(admission.run_writes(emulators)))
    if name == "cpu":
        from bench import cpu

        mentions = args.mentions
        tools = max(mentions // 2, 1)
        if args.before is None:
            return cpu.report(asyncio.run(cpu.run_cpu(emulators, mentions, tools, args.rounds)))
        with cpu.checked_out(args.before) as before:
            measured = asyncio.run(cpu.run_cpu(emulators, mentions, tools, args.rounds, before))
        return cpu.report(measured)
    if name == "refusal":
        from bench import refusal

        return refusal.report(refusal.run_refusal())
    from bench import load

    return load.report(asyncio.run(load.run_load(emulators, args.load)))


if __name__ == "__main__":
    main()
