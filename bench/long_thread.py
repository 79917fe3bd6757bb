"""One long thread (issue 48): what a turn costs at turns 10, 100 and 1,000 of a thread of
long messages and tool outputs, on both backends.

Every turn is a message of `MESSAGE` characters, a model turn that calls a tool, its output
of `OUTPUT` characters, and a short answer: about 5 KB of history a turn, 5 MB by turn
1,000. Every other turn's tool is the read-only `lookup`, the others' `file_note`, a side
effect (the ledger records it started, then its output; the run is checkpointed before it
runs, its RunState and the history it read included). The model is scripted, in process,
with a window of `WINDOW_TOKENS` tokens (`BOT_CONTEXT_TOKENS`), full from turn 8 on, so
that turn 10 is already given a full window: the run's history is fitted into it behind the
summary of the turns before, which the same model writes (`BOT_SUMMARIES`, on). Every
request it is sent is measured whole (its input as JSON, its instructions and its tools'
schemas, in UTF-8 bytes) against the budget docs/agents.md gives a window ("Long
conversations": a third left for the answer, three bytes a token): `BUDGET`.

Each backend serves three threads with the real runtime (`handle_message`: keep, serve,
commit, release), first built turn by turn to 9, 99 and 999 turns; then the turns from 10,
100 and 1,000 on are measured, `TURNS` of each, interleaved (one turn of each thread in
turn) so that this machine's drift falls on all three alike. Per turn: the process's CPU
(user and system, all its threads; the emulators run in theirs), the store's calls (the
outermost, by name), AWS requests (botocore's, counted by `bench.meter`), bytes written
(aws: the request bodies of writes; local: what the process wrote, write(2) bytes from
/proc/self/io, after a WAL checkpoint between turns, so that sqlite's copy of earlier turns
into the database file falls in none), the items and bytes its reads returned, the largest
model request, and the summaries the model wrote. Then replicas new to each thread (a new
runtime over the same store: no history in memory, no summary known) serve `FRESH` more
turns each. The process's resident memory is read after each thread is built.

Event claims are kept for a second on aws (the store's `claim_ttl`, 15 minutes by default):
turns follow each other here a few hundredths of a second apart, and more than 64 messages
in one claim period move a thread's claims to rows of their own (`INLINE_CLAIMS`, the step
the `growth` benchmark shows), which is the thread's pace, not its length."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import types
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from agents import Agent, FunctionTool, function_tool
from agents.testing import (
    ModelCall,
    ModelStep,
    ScriptedModel,
    assistant_message,
    function_call,
)

from bench.common import section, table, unique_key
from bench.emulators import Emulators
from bench.meter import METER, Tally
from bot.runtime import Answer, ConversationRuntime, retry_safe
from bot.settings import RuntimeSettings
from storage import ConversationKey, Store
from storage.local import LocalStore

MESSAGE = 2_500  # characters of each message
OUTPUT = 2_400  # characters of each tool output
WINDOW_TOKENS = 20_000  # the model's window (BOT_CONTEXT_TOKENS)
BUDGET = (WINDOW_TOKENS - WINDOW_TOKENS // 3) * 3  # bytes a request may carry
SUMMARY = 1_500  # characters of each summary the model writes
AT = (10, 100, 1_000)  # the turns measured from
TURNS = 20  # turns measured of each thread
FRESH = 4  # turns served by replicas new to each thread
NOTE_MARK = "file a note"  # a message that asks for the side effect
INSTRUCTIONS = "Answer briefly; look things up when asked."
SUMMARY_MARK = "You write the running summary of a Slack thread"  # how its request begins
FILLER = "the tide tables for the harbour say the spring tide comes two days after the full moon; "
STORE_CALLS = (
    "keep",
    "acquire",
    "renew",
    "release",
    "apply",
    "commit",
    "get",
    "stop_requested",
    "read_items",
    "read_summary",
    "read_inbox",
    "load_checkpoint",
    "begin_tool_call",
    "complete_tool_call",
    "get_tool_call",
    "claim_event",
)


def text(tag: str, size: int) -> str:
    head = f"[{tag}] "
    return head + (FILLER * (size // len(FILLER) + 1))[: size - len(head)]


def request_size(call: ModelCall) -> int:
    """What a request carries into the window, in UTF-8 bytes: its input as JSON, its
    instructions and its tools' definitions."""
    tools = [
        {"name": t.name, "description": t.description, "parameters": t.params_json_schema}
        for t in call.tools
        if isinstance(t, FunctionTool)
    ]
    given = json.dumps([call.input, tools], ensure_ascii=False, separators=(",", ":"))
    return len(given.encode()) + len((call.system_instructions or "").encode())


class WindowedModel(ScriptedModel):
    """Scripted and endless: a message gets a `file_note` call when it asks for one, else a
    `lookup` call, a tool's output an answer, a summary request a summary; every request's
    size is measured against `limit`."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.requests = 0
        self.over = 0  # requests larger than the window's budget for them
        self.largest = 0  # since `take_largest`
        self.summaries = 0

    def take_largest(self) -> int:
        largest, self.largest = self.largest, 0
        return largest

    async def _next_resolved_step(self, call: Any) -> Any:
        if self.remaining_steps < 2:
            self.extend([ModelStep.respond(self.respond) for _ in range(64)])
        self._calls.clear()  # a long benchmark must not keep every call's input
        return await super()._next_resolved_step(call)

    def respond(self, call: ModelCall) -> Any:
        size = request_size(call)
        self.requests += 1
        self.largest = max(self.largest, size)
        if size > self.limit:
            self.over += 1
        if (call.system_instructions or "").startswith(SUMMARY_MARK):
            self.summaries += 1
            return [assistant_message(text(f"summary {self.summaries}", SUMMARY))]
        items = call.input if isinstance(call.input, list) else []
        last = items[-1] if items else {}
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            return [assistant_message("Noted: the spring tide comes two days after it.")]
        call_id = f"call_{uuid.uuid4().hex[:12]}"
        if NOTE_MARK in str(last.get("content", "")):
            return [function_call("file_note", {"about": "tides"}, call_id=call_id)]
        return [function_call("lookup", {"topic": "tides"}, call_id=call_id)]


@function_tool
def lookup(topic: str) -> str:
    """Look a topic up (read-only)."""
    return text(f"facts about {topic}", OUTPUT)


@function_tool
def file_note(about: str) -> str:
    """File a note (a side effect, run once: the runtime approves it itself)."""
    return text(f"note filed about {about}", OUTPUT)


def build_agent(model: WindowedModel) -> Agent[Any]:
    return Agent(
        name="assistant",
        instructions=INSTRUCTIONS,
        model=model,
        tools=[retry_safe(lookup), file_note],
    )


class StoreCalls:
    """The store's calls (the outermost of each thread, by name) and what its reads returned.
    Each method is replaced by one of the same name bound to the store, so that the local
    store still makes its quick calls on the event loop's thread."""

    def __init__(self, store: Store) -> None:
        self.calls: Counter[str] = Counter()
        self.items_read = 0
        self.bytes_read = 0
        self.local = threading.local()
        self.lock = threading.Lock()
        for name in STORE_CALLS:
            self._wrap(store, name)

    def snapshot(self) -> tuple[Counter[str], int, int]:
        with self.lock:
            return self.calls.copy(), self.items_read, self.bytes_read

    def _wrap(self, store: Store, name: str) -> None:
        original = getattr(store, name)

        def counted(_store: Store, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(self.local, "depth", 0)
            self.local.depth = depth + 1
            try:
                found = original(*args, **kwargs)
            finally:
                self.local.depth = depth
            if depth == 0:
                with self.lock:
                    self.calls[name] += 1
                    if name == "read_items":
                        self.items_read += len(found.items)
                        self.bytes_read += sum(map(len, found.items))
                    elif name == "read_summary" and found is not None:
                        self.bytes_read += len(found.text)
            return found

        counted.__name__ = name
        setattr(store, name, types.MethodType(counted, store))


def written_bytes() -> int:
    """Bytes this process has written with write(2) and its kind (files, sockets)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


def resident_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


@dataclass
class Window:
    """What a stretch of turns of one thread cost, summed."""

    turns: int = 0
    answered: int = 0
    cpu_s: float = 0.0
    calls: Counter[str] = field(default_factory=Counter)
    items_read: int = 0
    bytes_read: int = 0
    written: int = 0
    tally: Tally = field(default_factory=Tally)
    largest: int = 0
    summaries: int = 0

    def per_turn(self, value: float) -> float:
        return value / max(self.turns, 1)

    @property
    def call_count(self) -> int:
        return sum(self.calls.values())

    def describe_calls(self) -> str:
        return ", ".join(
            f"{name} {count / max(self.turns, 1):.2f}".rstrip("0").rstrip(".")
            for name, count in sorted(self.calls.items())
        )

    def figures(self) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "answered": self.answered,
            "cpu_ms": self.per_turn(self.cpu_s * 1000),
            "storage_calls": self.per_turn(self.call_count),
            "calls": {k: self.per_turn(v) for k, v in self.calls.items()},
            "aws_requests": self.per_turn(self.tally.total),
            "requests": {k: self.per_turn(v) for k, v in self.tally.requests.items()},
            "bytes_written": self.per_turn(self.written),
            "items_read": self.per_turn(self.items_read),
            "bytes_read": self.per_turn(self.bytes_read),
            "largest_request": self.largest,
            "summaries": self.summaries,
        }


@dataclass
class Backend:
    name: str
    budget: int  # bytes a request may carry
    windows: dict[int, Window] = field(default_factory=dict)  # by the turn measured from
    fresh: dict[int, Window] = field(default_factory=dict)
    resident_mb: dict[int, float] = field(default_factory=dict)  # after building each thread
    cached_kb: dict[int, float] = field(default_factory=dict)  # its history kept in memory
    stored_mb: dict[int, float] = field(default_factory=dict)  # its history in storage
    requests: int = 0
    over: int = 0
    turns: int = 0
    answered: int = 0


class Thread:
    """One measured thread of a backend."""

    def __init__(self, key: ConversationKey) -> None:
        self.key = key
        self.said = 0  # turns so far


async def run_backend(
    name: str, store: Store, *, at: tuple[int, ...] = AT, turns: int = TURNS, fresh: int = FRESH
) -> Backend:
    model = WindowedModel(BUDGET)
    agent = build_agent(model)
    settings = RuntimeSettings(context_tokens=WINDOW_TOKENS)
    counted = StoreCalls(store)
    side = Backend(name, BUDGET)
    wal = store.database.connection() if isinstance(store, LocalStore) else None

    async def turn(rt: ConversationRuntime, thread: Thread) -> bool:
        thread.said += 1
        ask = f" {NOTE_MARK}" if thread.said % 2 == 0 else ""
        message = text(f"message {thread.said}{ask}", MESSAGE)
        outcomes = await rt.handle_message(
            thread.key, event_id=uuid.uuid4().hex, user="U1", text=message
        )
        side.turns += 1
        answered = len(outcomes) == 1 and isinstance(outcomes[0], Answer)
        side.answered += answered
        return answered

    async def measured(rt: ConversationRuntime, thread: Thread, window: Window) -> None:
        if wal is not None:  # sqlite's copy of earlier turns into the database: not this one's
            wal.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        calls, items, read = counted.snapshot()
        summaries = model.summaries
        model.take_largest()
        wrote = written_bytes()
        with METER.measure() as tally:
            cpu = time.process_time()
            answered = await turn(rt, thread)
            window.cpu_s += time.process_time() - cpu
        window.written += (written_bytes() - wrote) if wal is not None else tally.write_bytes
        after, items_after, read_after = counted.snapshot()
        window.turns += 1
        window.answered += answered
        window.calls.update(after - calls)
        window.items_read += items_after - items
        window.bytes_read += read_after - read
        window.tally.add(tally)
        window.largest = max(window.largest, model.take_largest())
        window.summaries += model.summaries - summaries

    rt = ConversationRuntime(store, agent, settings)
    threads = {start: Thread(unique_key(f"LT{start}")) for start in at}
    for start, thread in threads.items():
        while thread.said < start - 1:
            await turn(rt, thread)
        side.resident_mb[start] = resident_mb()
    for _ in range(turns):  # interleaved: one turn of each thread in turn
        for start, thread in threads.items():
            await measured(rt, thread, side.windows.setdefault(start, Window()))
    for start, thread in threads.items():
        record = store.get(thread.key)
        known = rt.parts.history.get(record) if record is not None else None
        side.cached_kb[start] = sum(map(len, known.items)) / 1024 if known else 0.0
        side.stored_mb[start] = sum(map(len, store.read_items(thread.key).items)) / 2**20
    for _ in range(fresh):
        for start, thread in threads.items():
            new_replica = ConversationRuntime(store, build_agent(model), settings)
            await measured(new_replica, thread, side.fresh.setdefault(start, Window()))
            new_replica.storage_calls.close()
    rt.storage_calls.close()
    side.requests, side.over = model.requests, model.over
    return side


async def run_long_thread(
    emulators: Emulators | None,
    *,
    at: tuple[int, ...] = AT,
    turns: int = TURNS,
    fresh: int = FRESH,
) -> list[Backend]:
    """Both backends (local only without `emulators`)."""
    sides = []
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalStore(Path(tmp))
        try:
            sides.append(await run_backend("local", local, at=at, turns=turns, fresh=fresh))
        finally:
            local.close()
    if emulators is not None:
        aws = emulators.store("long", claim_ttl=timedelta(seconds=1))
        try:
            sides.append(await run_backend("aws", aws, at=at, turns=turns, fresh=fresh))
        finally:
            aws.close()
    return sides


def _row(side: Backend, label: str, w: Window) -> list[str]:
    aws = side.name == "aws"
    return [
        side.name,
        label,
        f"{w.per_turn(w.cpu_s * 1000):.1f}",
        f"{w.per_turn(w.call_count):.2f}",
        w.describe_calls(),
        f"{w.per_turn(w.tally.total):.2f}" if aws else "—",
        _requests(w) if aws else "—",
        f"{w.per_turn(w.written) / 1024:.1f}",
        f"{w.per_turn(w.items_read):.1f}",
        f"{w.per_turn(w.bytes_read) / 1024:.1f}",
        f"{w.largest / 1024:.1f} / {side.budget / 1024:.1f}",
        f"{w.summaries}",
    ]


def _requests(w: Window) -> str:
    return ", ".join(
        f"{name.split('.', 1)[1]} {count / max(w.turns, 1):.2f}".rstrip("0").rstrip(".")
        for name, count in sorted(w.tally.requests.items())
    )


def report(sides: list[Backend], turns: int = TURNS, fresh: int = FRESH) -> dict[str, Any]:
    starts = sorted({start for side in sides for start in side.windows})
    section(
        "One long thread: a turn at turns 10, 100 and 1,000 (issue 48)",
        f"Each turn: a message of {MESSAGE:,} characters, a model turn calling a "
        f"tool (every other turn the read-only `lookup`, the others `file_note`, a side "
        f"effect run once through the ledger, checkpointed before it runs), its output of "
        f"{OUTPUT:,} characters, a short answer (about 5 KB of "
        f"history a turn, 5 MB by turn 1,000). A scripted model with a window of "
        f"{WINDOW_TOKENS:,} tokens (`BOT_CONTEXT_TOKENS`: {sides[0].budget / 1024:.1f} KB a "
        "request may carry, the rest left for the answer; full from turn 8 on) that writes "
        "the summaries too. "
        f"Three threads per backend, built to 9, 99 and 999 turns, then {turns} turns of each "
        "measured, interleaved; per turn, the mean of those. CPU: this process, all its "
        "threads (the emulators run in theirs). Storage calls: the store's, by name. Bytes "
        "written: aws, the request bodies of writes; local, write(2) bytes (WAL and files), "
        "after a WAL checkpoint between turns. Read: the items and summaries the store "
        "returned. Largest request: its input as JSON, its instructions and its tools' "
        "schemas, against that budget. Summaries: those the model wrote in the measured turns. "
        '"new replica": a runtime new to the thread (nothing in memory) serving '
        f"{fresh} turns after them. Event claims are kept for a second on aws (see "
        "`bench/long_thread.py`).",
    )
    rows = []
    for side in sides:
        for start in starts:
            w = side.windows[start]
            rows.append(_row(side, f"{start:,}-{start + w.turns - 1:,}", w))
        for start in starts:
            rows.append(
                _row(
                    side, f"new replica at {start + side.windows[start].turns:,}", side.fresh[start]
                )
            )
    print(
        table(
            [
                "backend",
                "turns",
                "CPU ms",
                "storage calls",
                "which",
                "AWS requests",
                "which",
                "KB written",
                "items read",
                "KB read",
                "largest request / budget, KB",
                "summaries made",
            ],
            rows,
            "llrrlrlrrrrr",
        ),
        flush=True,
    )
    print()
    first, last = starts[0], starts[-1]
    for side in sides:
        a, b = side.windows[first], side.windows[last]
        ratios = [
            ("CPU", a.cpu_s, b.cpu_s),
            ("storage calls", a.call_count, b.call_count),
            ("AWS requests", a.tally.total, b.tally.total),
            ("bytes written", a.written, b.written),
            ("items read", a.items_read, b.items_read),
        ]
        shown = [
            f"{label} {y / x:.2f}x"
            for label, x, y in ratios
            if x and (side.name == "aws" or label != "AWS requests")
        ]
        print(
            f"{side.name}: turn {last:,} against turn {first:,}: {', '.join(shown)}; "
            f"{side.answered:,} of {side.turns:,} turns answered, {side.over} of "
            f"{side.requests:,} model requests over the window's budget; resident memory after "
            "building each thread "
            + ", ".join(
                f"{mb:.0f} MB ({start - 1:,} turns)" for start, mb in side.resident_mb.items()
            )
            + "; its history in storage "
            + ", ".join(f"{mb:.2f} MB" for mb in side.stored_mb.values())
            + ", in memory "
            + ", ".join(f"{kb:.0f} KB" for kb in side.cached_kb.values())
            + ".",
            flush=True,
        )
    return {
        side.name: {
            "windows": {str(s): w.figures() for s, w in side.windows.items()},
            "new_replica": {str(s): w.figures() for s, w in side.fresh.items()},
            "resident_mb": side.resident_mb,
            "stored_mb": side.stored_mb,
            "cached_kb": side.cached_kb,
            "budget": side.budget,
            "requests": side.requests,
            "over_budget": side.over,
            "turns": side.turns,
            "answered": side.answered,
        }
        for side in sides
    }
