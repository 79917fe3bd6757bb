"""Time per turn: a bare `Runner.run` with an in-memory `SQLiteSession` against the durable
runtime (`handle_message`: keep, serve, checkpoint, release) on both backends, interleaved
turn by turn so that the machine's noise falls on all three alike, with the same scripted
model and agent. The durable overhead is compared with the raw latency of the requests a
durable aws turn makes: after each aws turn the same kinds of request (as the meter counted
them) are sent raw and timed, so that the I/O figure shares the turns' moment (this machine's
speed drifts by a third from one minute to the next). The target is (durable - bare) ≤ 1.5 x
that I/O."""

from __future__ import annotations

import itertools
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import Runner, SQLiteSession
from agents.memory import SessionSettings

from bench.agents import build_agent
from bench.common import percentile, section, table, unique_key
from bench.emulators import Emulators, raw_requests
from bench.meter import METER, Tally
from bot.runtime import ConversationRuntime
from bot.settings import RuntimeSettings
from storage.local import LocalStore


@dataclass
class TurnFigures:
    timings: dict[str, list[float]]  # path -> ms per turn
    aws_requests: Tally  # all requests of the durable aws turns
    turns: int
    raw_io: list[float]  # ms: the same requests as each aws turn's, sent raw right after it
    paced_io: list[float]  # ms: the same again, each after a pause as long as a model turn

    def p(self, path: str, pct: float) -> float:
        return percentile(self.timings[path], pct)


async def run_turns(emulators: Emulators, turns: int, text: str = "hello") -> TurnFigures:
    """`turns` turns of each path, interleaved; a few unmeasured turns first."""
    bare_agent = build_agent()
    # The same history window as the runtime's (BOT_HISTORY_ITEMS), so both send the model
    # the same input.
    window = SessionSettings(limit=RuntimeSettings().history_items)
    session = SQLiteSession(f"bench-{uuid.uuid4().hex[:6]}", session_settings=window)
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalStore(Path(tmp))
        aws = emulators.store("turns")
        runtimes = {
            "durable, local": ConversationRuntime(local, build_agent()),
            "durable, aws": ConversationRuntime(aws, build_agent()),
        }
        keys = {name: unique_key("CT") for name in runtimes}
        timings: dict[str, list[float]] = {"bare": [], **{name: [] for name in runtimes}}
        aws_tally = Tally()
        raw_store, raw_calls = raw_requests(emulators)
        raw_io: list[float] = []
        paced_io: list[float] = []
        sent = itertools.count()

        def raw_turn(tally: Tally, pause: float = 0.0) -> float:
            """The turn's requests sent raw, one after another (or each after `pause`
            seconds idle, as the commit follows the model turn): ms spent in them."""
            spent = 0.0
            for kind, count in tally.requests.items():
                for _ in range(count):
                    time.sleep(pause)
                    start = time.perf_counter()
                    raw_calls[kind](next(sent))
                    spent += time.perf_counter() - start
            return spent * 1000

        async def bare_turn(n: int) -> float:
            start = time.perf_counter()
            await Runner.run(bare_agent, f"{text} {n}", session=session)
            return (time.perf_counter() - start) * 1000

        async def durable_turn(name: str, n: int) -> tuple[float, Tally]:
            with METER.measure() as tally:
                start = time.perf_counter()
                await runtimes[name].handle_message(
                    keys[name], event_id=uuid.uuid4().hex, user="U", text=f"{text} {n}"
                )
                elapsed = (time.perf_counter() - start) * 1000
            return elapsed, tally

        for n in range(-5, turns):
            b = await bare_turn(n)
            results = {name: await durable_turn(name, n) for name in runtimes}
            raw = raw_turn(results["durable, aws"][1])
            paced = raw_turn(results["durable, aws"][1], pause=b / 1000)
            if n < 0:
                continue
            timings["bare"].append(b)
            raw_io.append(raw)
            paced_io.append(paced)
            for name, (elapsed, tally) in results.items():
                timings[name].append(elapsed)
                if name == "durable, aws":
                    aws_tally.add(tally)
        for runtime in runtimes.values():
            runtime.storage_calls.close()
        local.close()
        aws.close()
        raw_store.close()
    return TurnFigures(timings, aws_tally, turns, raw_io, paced_io)


def per_turn_requests(figures: TurnFigures) -> dict[str, float]:
    return {kind: n / figures.turns for kind, n in figures.aws_requests.requests.items()}


def report(figures: TurnFigures, emulators: Emulators) -> dict[str, Any]:
    section(
        f"Time per turn, ms ({figures.turns} turns each, interleaved, same scripted model)",
        "Durable = `handle_message`: keep the message (taking the thread), run one model "
        "turn, commit the checkpoint with the turn's items, post nothing (no Slack here), "
        "release. Bare = `Runner.run` with an in-memory `SQLiteSession` and the same history "
        "window (60 items).",
    )
    base50, base99 = figures.p("bare", 50), figures.p("bare", 99)
    rows: list[list[object]] = [
        ["bare Runner.run + SQLiteSession", f"{base50:.2f}", f"{base99:.2f}", "1.0", "—"]
    ]
    for name in ("durable, local", "durable, aws"):
        p50, p99 = figures.p(name, 50), figures.p(name, 99)
        rows.append(
            [f"{name}", f"{p50:.2f}", f"{p99:.2f}", f"{p50 / base50:.1f}", f"{p50 - base50:.2f}"]
        )
    print(table(["path", "p50", "p99", "p50 ÷ bare", "p50 - bare"], rows))
    requests = per_turn_requests(figures)
    table_io = emulators.io_ms(requests)
    raw_p50 = percentile(figures.raw_io, 50)
    overhead = figures.p("durable, aws", 50) - base50
    ratio = overhead / raw_p50 if raw_p50 else float("inf")
    listed = ", ".join(f"{kind.split('.', 1)[1]}x{n:g}" for kind, n in sorted(requests.items()))
    print(
        f"\nA durable aws turn makes {sum(requests.values()):g} requests ({listed}). The same "
        f"requests sent raw right after each aws turn take {raw_p50:.2f} ms (p50; "
        f"{percentile(figures.raw_io, 99):.2f} ms p99; their p50s in the raw table above sum "
        f"to {table_io:.2f} ms). Durable overhead (p50 - bare p50) = {overhead:.2f} ms = "
        f"**{ratio:.2f} x its I/O** (target ≤ 1.5x)."
    )
    paced = percentile(figures.paced_io, 50)
    print(
        f"\nThe same requests again, each sent after the emulators sat idle as long as a bare "
        f"turn (as the commit follows the model turn): {paced:.2f} ms (p50). Against that "
        f"I/O the overhead is {overhead / paced if paced else float('inf'):.2f} x: a request "
        "that follows a pause is slower on this machine than one sent back to back."
    )
    return {
        "bare_p50": base50,
        "bare_p99": base99,
        "local_p50": figures.p("durable, local", 50),
        "local_p99": figures.p("durable, local", 99),
        "aws_p50": figures.p("durable, aws", 50),
        "aws_p99": figures.p("durable, aws", 99),
        "requests_per_turn": requests,
        "io_ms": raw_p50,
        "io_ms_raw_table": table_io,
        "io_ms_paced": paced,
        "overhead_ms": overhead,
        "overhead_over_io": ratio,
    }
