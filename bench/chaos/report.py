"""The soak's table: runs by fault kind and backend, violations by invariant and backend, the
seed that replays each violation, and timing. Also written as JSON next to the histories."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from bench.chaos.invariants import KINDS
from bench.chaos.run import RunResult


def table(results: list[RunResult], timing: dict[str, Any]) -> str:
    backends = sorted({r.backend for r in results})
    lines: list[str] = []
    total = timing.get("total_seconds", 0.0)
    seeds = sorted({r.seed for r in results})
    lines.append(
        f"chaos soak: {len(results)} runs ("
        + ", ".join(f"{b} {sum(r.backend == b for r in results)}" for b in backends)
        + f"), seeds {seeds[0]}..{seeds[-1]}, {total:.0f} s; histories in {timing.get('out')}"
        if results
        else "chaos soak: no runs"
    )
    if not results:
        return "\n".join(lines)
    width = max([len(k) for k in KINDS] + [len(n) + 2 for r in results for n in r.exercised] + [28])
    head = f"{'':{width}}" + "".join(f"{b:>8}" for b in backends)

    def row(name: str, count: Any) -> str:
        return f"  {name:{width - 2}}" + "".join(f"{count(b):>8}" for b in backends)

    lines += ["", f"{'runs by fault kind':{width}}" + head[width:]]
    kinds = sorted({k for r in results for k in r.fault_kinds})
    for kind in kinds:
        lines.append(
            row(kind, lambda b, k=kind: sum(k in r.fault_kinds and r.backend == b for r in results))
        )
    for count in (1, 2):
        lines.append(
            row(
                f"({count} replica{'s' if count > 1 else ''})",
                lambda b, c=count: sum(r.replicas == c and r.backend == b for r in results),
            )
        )
    lines.append(
        row(
            "(with an admin discard)", lambda b: sum(r.discards and r.backend == b for r in results)
        )
    )
    for workload in (
        "burst",
        "expiry",
        "stop",
        "discard_mid_tool",
        "agent_graph",
        "guardrail",
        "keyed",
        "redelivered_stop",
        "uninstall",
        "slow_tool",
        "output_guardrail",
        "stale_home_discard",
        "unsigned_slow",
        "resume_at_cap",
    ):
        lines.append(
            row(
                f"(with {workload})",
                lambda b, w=workload: sum(w in r.workloads and r.backend == b for r in results),
            )
        )
    happened = [name for r in results for name in r.exercised]
    if happened:  # what of issue 49's shapes happened, not only what the plans drew
        lines += ["", f"{'issue 49 shapes exercised':{width}}" + head[width:]]
        for name in dict.fromkeys(happened):
            lines.append(
                row(name, lambda b, n=name: _total(n, [r for r in results if r.backend == b]))
            )
    lines += ["", f"{'invariant violations':{width}}" + head[width:]]
    for kind in KINDS:
        lines.append(
            row(
                kind,
                lambda b, k=kind: sum(
                    v.kind == k for r in results if r.backend == b for v in r.violations
                ),
            )
        )
    lines.append(row("total", lambda b: sum(len(r.violations) for r in results if r.backend == b)))
    lines.append(
        row(
            "runs with a violation",
            lambda b: sum(bool(r.violations) and r.backend == b for r in results),
        )
    )
    lines.append(
        row("harness errors", lambda b: sum(bool(r.error) and r.backend == b for r in results))
    )
    lines.append(
        row("runs never quiet", lambda b: sum((not r.quiet) and r.backend == b for r in results))
    )
    lines.append(
        row(
            "messages never delivered",
            lambda b: sum(r.undelivered for r in results if r.backend == b),
        )
    )
    bad = [r for r in results if r.violations or r.error]
    if bad:
        lines += [
            "",
            "violations (replay one: ./dev chaos --backend B --seed S --runs 1 [--replicas N])",
        ]
        for result in bad:
            lines.append(
                f"  seed {result.seed} {result.backend} replicas {result.replicas} "
                f"faults {','.join(result.fault_kinds)}"
                + (" + admin discard" if result.discards else "")
                + "".join(f" + {w}" for w in result.workloads)
                + f"  ({result.history})"
            )
            if result.error:
                lines.append(f"      harness error: {result.error}")
            for violation in result.violations:
                lines.append(f"      {violation.kind}: {violation.thread}: {violation.detail}")
    run_seconds = [r.seconds for r in results]
    quiet_seconds = [r.quiet_seconds for r in results]
    starts = timing.get("replica_starts") or [0.0]
    lines += [
        "",
        f"timing: run p50 {_p(run_seconds, 50):.1f} s, p90 {_p(run_seconds, 90):.1f} s, "
        f"max {max(run_seconds):.1f} s; heal to quiet p50 {_p(quiet_seconds, 50):.1f} s, "
        f"max {max(quiet_seconds):.1f} s; bot start to healthy p50 {_p(starts, 50):.1f} s "
        f"({len(timing.get('replica_starts') or [])} starts)",
    ]
    exits = timing.get("replica_exits") or []
    if exits:
        lines.append(
            f"        SIGTERM to exit, when a restart waited for it: p50 {_p(exits, 50):.1f} s, "
            f"max {max(exits):.1f} s ({len(exits)} waits)"
        )
    return "\n".join(lines)


def _total(name: str, results: list[RunResult]) -> int:
    """A count summed over the runs; a most (`most ...`), the most of them."""
    counts = [r.exercised.get(name, 0) for r in results]
    return max(counts, default=0) if name.startswith("most ") else sum(counts)


def _p(values: list[float], percent: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


def write_summary(path: Path, results: list[RunResult], timing: dict[str, Any]) -> None:
    document = {
        "timing": timing,
        "runs": [
            {
                "seed": r.seed,
                "backend": r.backend,
                "replicas": r.replicas,
                "faults": r.fault_kinds,
                "seconds": round(r.seconds, 2),
                "quiet": r.quiet,
                "undelivered": r.undelivered,
                "discards": r.discards,
                "workloads": r.workloads,
                "exercised": r.exercised,
                "error": r.error,
                "history": r.history,
                "violations": [v.__dict__ for v in r.violations],
            }
            for r in results
        ],
        "violations": dict(Counter(v.kind for r in results for v in r.violations)),
    }
    path.write_text(json.dumps(document, indent=1))
