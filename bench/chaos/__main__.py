"""`python -m bench.chaos [--runs N] [--backend local|aws|both] [--seed S] [--until HH:MM]`

Runs N chaos runs per backend (seeds S, S+1, ...), prints the table, writes each run's
history and `summary.json` under test-artifacts/chaos/<stamp>/. `--seed S --runs 1` replays
one run. SIGTERM or SIGINT ends the soak after the run in progress, with its table; a second
stops it at once. Exit status: 0 with no violation, 1 with violations, 2 with harness errors
(or stopped at once)."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.chaos.plan import FAMILIES
from bench.chaos.report import table, write_summary
from bench.chaos.soak import SoakOptions, soak


def _until(clock: str) -> float:
    """The next time the UTC clock reads HH:MM, as epoch seconds."""
    hours, minutes = (int(part) for part in clock.split(":"))
    now = datetime.now(UTC)
    moment = now.replace(hour=hours, minute=minutes, second=0, microsecond=0)
    if moment <= now:
        moment += timedelta(days=1)
    return moment.timestamp()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--runs", type=int, default=12, help="runs per backend (default 12)")
    parser.add_argument("--backend", default="local", help="local, aws, or both (local,aws)")
    parser.add_argument("--seed", type=int, default=None, help="first run's seed (default: random)")
    parser.add_argument("--replicas", default="auto", choices=["auto", "1", "2"])
    parser.add_argument(
        "--faults",
        default=",".join(FAMILIES),
        help=f"fault families to draw from (default {','.join(FAMILIES)})",
    )
    parser.add_argument(
        "--lease",
        type=float,
        default=2.0,
        help="BOT_LEASE_SECONDS (2); SIGSTOP lasts 3-4.5 s, past the default lease",
    )
    parser.add_argument("--transfer-delay", type=float, default=0.8, help="seconds per transfer")
    parser.add_argument("--out", type=Path, default=None, help="artifacts folder")
    parser.add_argument(
        "--until",
        default=None,
        help="HH:MM (UTC): start no run after it; the table covers the runs made by then",
    )
    args = parser.parse_args()
    backends = ["local", "aws"] if args.backend in ("both", "all") else args.backend.split(",")
    if any(b not in ("local", "aws") for b in backends):
        parser.error("--backend is local, aws or both")
    families = tuple(f for f in args.faults.split(",") if f)
    if any(f not in FAMILIES for f in families):
        parser.error(f"--faults: families are {', '.join(FAMILIES)}")
    seed = args.seed if args.seed is not None else random.randrange(1, 1_000_000)
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    options = SoakOptions(
        runs=args.runs,
        backends=backends,
        seed=seed,
        replicas=args.replicas,
        families=families,
        lease_seconds=args.lease,
        transfer_delay=args.transfer_delay,
    )
    if args.out is not None:
        options.out = args.out
    if args.until is not None:
        options.until = _until(args.until)
    try:
        results, timing = asyncio.run(soak(options))
    except asyncio.CancelledError:  # stopped at once by a second signal
        print("[chaos] stopped in the middle of a run: no table", flush=True)
        return 2
    print(table(results, timing), flush=True)
    write_summary(Path(timing["out"]) / "summary.json", results, timing)
    if any(r.error for r in results):
        return 2
    return 1 if any(r.violations for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
