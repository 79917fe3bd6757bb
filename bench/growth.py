"""As threads grow: our runtime next to LangGraph with `langgraph-checkpoint-aws`'s
`DynamoDBSaver`, on the same DynamoDB Local and moto S3, one thread of 500 model + tool
turns each (a user message, a model turn that calls a read-only `lookup` tool, the tool,
a model turn that answers; the same texts on both sides).

Per turn, at turns 10 / 100 / 500: AWS requests, bytes written (request bodies of DynamoDB
writes and S3 PUTs), the capacity DynamoDB reports, the time spent in the persistence layer,
and what that costs at list prices; plus the time to load the latest state of a 500-turn
thread. LangGraph needs the optional `bench` extra (`pip install -e .[bench]`); without it
only our side is measured and the report says so."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from bench.agents import build_agent
from bench.common import median, section, table, unique_key
from bench.emulators import Emulators
from bench.meter import METER, Tally
from bot.runtime import ConversationRuntime
from bot.settings import RuntimeSettings
from storage import ConversationKey
from storage.aws import AwsStore

# List prices, us-east-1, as published on the AWS pricing pages (checked 2026-11-30; the
# DynamoDB on-demand prices are those in force since the reduction of 1 November 2024).
PRICE_WRU = 0.625 / 1e6  # DynamoDB on-demand, per write request unit
PRICE_RRU = 0.125 / 1e6  # DynamoDB on-demand, per read request unit
PRICE_S3_PUT = 0.005 / 1000  # S3 Standard PUT, COPY, POST, LIST
PRICE_S3_GET = 0.0004 / 1000  # S3 Standard GET, SELECT and others
PRICES_NOTE = (
    "List prices, us-east-1: DynamoDB on-demand $0.625 per million write request units and "
    "$0.125 per million read request units (in force since 1 Nov 2024), S3 Standard $0.005 "
    "per 1,000 PUTs and $0.0004 per 1,000 GETs (as listed on 2026-11-30). Units are those "
    "DynamoDB Local reports (transactional writes count double, as on AWS; index writes "
    "included). Storage is not included."
)
MISSING_EXTRA = (
    "LangGraph is not installed: install the optional `bench` extra "
    "(`pip install -e .[bench]`, which `./dev bench` does) to run the comparison."
)
CHECKPOINTS = (10, 100, 500)


def cost_per_thousand(t: Tally) -> float:
    """Dollars per 1,000 such turns."""
    return 1000 * (
        (t.write_units + t.index_write_units) * PRICE_WRU
        + t.read_units * PRICE_RRU
        + t.count("s3", "PutObject") * PRICE_S3_PUT
        + t.count("s3", "GetObject") * PRICE_S3_GET
    )


class StorageClock:
    """Wall-clock time with a call into a set of methods in flight (the outermost call per
    thread; overlapping calls, such as the saver's background writes, count once)."""

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []
        self.local = threading.local()
        self.lock = threading.Lock()

    def wrap(self, owner: Any, names: tuple[str, ...]) -> None:
        for name in names:
            setattr(owner, name, self._timed(getattr(owner, name)))

    def _timed(self, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self.local, "depth", 0)
            self.local.depth = depth + 1
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.local.depth = depth
                if depth == 0:
                    with self.lock:
                        self.intervals.append((start, time.perf_counter()))

        return timed

    def since(self, moment: float) -> float:
        """Seconds of the union of the intervals that began after `moment`."""
        with self.lock:
            spans = sorted(i for i in self.intervals if i[0] >= moment)
        total, end = 0.0, moment
        for start, stop in spans:
            start = max(start, end)
            if stop > start:
                total += stop - start
                end = stop
        return total


@dataclass
class Side:
    name: str
    tallies: list[Tally] = field(default_factory=list)  # per turn
    storage_ms: list[float] = field(default_factory=list)  # per turn
    turn_ms: list[float] = field(default_factory=list)
    load_latest_ms: float = 0.0
    load_latest_requests: Tally | None = None
    record_bytes: dict[int, int] = field(default_factory=dict)  # ours: the META item, by turn

    def at(self, turn: int) -> Tally:
        return self.tallies[turn - 1]

    def storage_at(self, turn: int) -> float:
        return median(self.storage_ms[max(0, turn - 5) : turn])

    def turn_at(self, turn: int) -> float:
        return median(self.turn_ms[max(0, turn - 5) : turn])


async def ours(emulators: Emulators, turns: int, *, prune_claims: bool = False) -> Side:
    """Our runtime; `prune_claims` is a what-if: per-thread event claims are kept for a second
    (the store's `claim_ttl`, 15 minutes by default), so the record carries the claims of the
    last seconds only, as it would for a thread slower than one message per `claim_ttl`."""
    options: dict[str, Any] = {"claim_ttl": timedelta(seconds=1)} if prune_claims else {}
    store: AwsStore = emulators.store("growth", **options)
    clock = StorageClock()
    clock.wrap(
        store,
        (
            "keep",
            "read_items",
            "commit",
            "release",
            "apply",
            "get",
            "acquire",
            "load_checkpoint",
            "read_inbox",
            "complete_tool_call",
            "begin_tool_call",
            "get_tool_call",
        ),
    )
    runtime = ConversationRuntime(store, build_agent(), RuntimeSettings())
    key = unique_key("CG")
    side = Side(
        "ours, what-if: event claims kept for a second"
        if prune_claims
        else "ours: durable runtime, DynamoDB + S3"
    )
    for n in range(1, turns + 1):
        with METER.measure() as tally:
            start = time.perf_counter()
            await runtime.handle_message(
                key, event_id=uuid.uuid4().hex, user="U", text=f"lookup topic {n}"
            )
            side.turn_ms.append((time.perf_counter() - start) * 1000)
        side.tallies.append(tally)
        side.storage_ms.append(clock.since(start) * 1000)
        if n in CHECKPOINTS:
            side.record_bytes[n] = record_size(store, key)
    # The latest state as a resume needs it: record, checkpoint, the history window.
    samples = []
    for _ in range(20):
        with METER.measure() as load:
            start = time.perf_counter()
            record = store.get(key)
            assert record is not None and record.checkpoint is not None
            store.load_checkpoint(record.checkpoint)
            store.read_items(key, runtime.settings.history_items)
            samples.append((time.perf_counter() - start) * 1000)
    side.load_latest_ms = median(samples)
    side.load_latest_requests = load
    runtime.storage_calls.close()
    store.close()
    return side


def record_size(store: AwsStore, key: ConversationKey) -> int:
    """Bytes of the conversation's record as DynamoDB sizes items (names + values)."""
    item = store.dynamodb.get_item(
        TableName=store.table, Key={"pk": {"S": f"CONV#{key}"}, "sk": {"S": "META"}}
    )["Item"]
    size = 0
    for name, value in item.items():
        size += len(name.encode())
        for inner in value.values():
            if isinstance(inner, list):
                size += sum(len(str(v).encode()) for v in inner)
            else:
                size += len(str(inner).encode())
    return size


def langgraph_available() -> bool:
    try:
        import langgraph  # noqa: F401
        import langgraph_checkpoint_aws  # noqa: F401
    except ImportError:
        return False
    return True


def _langgraph_table(emulators: Emulators) -> tuple[str, str]:
    import boto3

    name = f"lg-{uuid.uuid4().hex[:8]}"
    session = boto3.session.Session()
    dynamodb = session.client("dynamodb")
    dynamodb.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "PK", "KeyType": "HASH"},
            {"AttributeName": "SK", "KeyType": "RANGE"},
        ],
    )
    dynamodb.get_waiter("table_exists").wait(TableName=name)
    session.client("s3").create_bucket(Bucket=name)
    return name, name


def theirs(emulators: Emulators, turns: int) -> Side:
    """LangGraph's agent loop (model node, tool node) with `DynamoDBSaver`, S3 offload on."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from langgraph_checkpoint_aws import DynamoDBSaver

    @tool  # type: ignore[untyped-decorator, unused-ignore]  # untyped when the extra is absent
    def lookup(topic: str) -> str:
        """Look a topic up (read-only)."""
        return f"facts about {topic}: " + "lorem ipsum dolor sit amet " * 4

    def model(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        if isinstance(last, ToolMessage):
            return {"messages": [AIMessage(content=f"done: {last.content}")]}
        text = str(last.content)
        call = {
            "name": "lookup",
            "args": {"topic": text[-40:]},
            "id": f"call_{uuid.uuid4().hex[:12]}",
        }
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    table_name, bucket = _langgraph_table(emulators)
    saver = DynamoDBSaver(table_name=table_name, s3_offload_config={"bucket_name": bucket})
    clock = StorageClock()
    clock.wrap(saver, ("get_tuple", "put", "put_writes", "list"))
    graph_builder = StateGraph(MessagesState)
    graph_builder.add_node("model", model)
    graph_builder.add_node("tools", ToolNode([lookup]))
    graph_builder.add_edge(START, "model")
    graph_builder.add_conditional_edges("model", tools_condition, ["tools", END])
    graph_builder.add_edge("tools", "model")
    graph = graph_builder.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": f"thread-{uuid.uuid4().hex[:8]}"}}
    side = Side("LangGraph + DynamoDBSaver (langgraph-checkpoint-aws)")
    for n in range(1, turns + 1):
        with METER.measure() as tally:
            start = time.perf_counter()
            graph.invoke({"messages": [HumanMessage(f"lookup topic {n}")]}, config)
            side.turn_ms.append((time.perf_counter() - start) * 1000)
        side.tallies.append(tally)
        side.storage_ms.append(clock.since(start) * 1000)
    samples = []
    for _ in range(20):
        with METER.measure() as load:
            start = time.perf_counter()
            assert saver.get_tuple(config) is not None
            samples.append((time.perf_counter() - start) * 1000)
    side.load_latest_ms = median(samples)
    side.load_latest_requests = load
    return side


def report(sides: list[Side], langgraph: bool) -> dict[str, Any]:
    section(
        "Growing threads: ours next to LangGraph's DynamoDBSaver, per model + tool turn",
        "One thread per side, 500 turns; each turn is a message, a model turn calling the "
        "read-only `lookup` tool, the tool, and a model turn answering (identical texts). "
        "Same DynamoDB Local and moto S3, same run. Storage time is the time spent inside "
        "the persistence layer (our `Store` methods; the saver's `get_tuple`/`put`/"
        "`put_writes`), median of the 5 turns up to the one named."
        + ("" if langgraph else "\n\n" + MISSING_EXTRA),
    )
    rows = []
    for side in sides:
        for turn in CHECKPOINTS:
            if turn > len(side.tallies):
                continue
            t = side.at(turn)
            rows.append(
                [
                    side.name if turn == CHECKPOINTS[0] else "",
                    turn,
                    f"{t.dynamodb} + {t.s3}",
                    t.describe(),
                    f"{t.write_bytes:,}",
                    f"{t.read_units:.1f}",
                    f"{t.write_units + t.index_write_units:.1f}",
                    f"{side.storage_at(turn):.1f}",
                    f"{side.turn_at(turn):.1f}",
                ]
            )
    print(
        table(
            [
                "system",
                "turn",
                "requests (DynamoDB + S3)",
                "which",
                "bytes written",
                "RCU",
                "WCU (incl. index)",
                "storage ms",
                "turn ms",
            ],
            rows,
            "lrrlrrrrr",
        )
    )
    print()
    load_rows = [
        [
            side.name,
            f"{side.load_latest_ms:.1f}",
            side.load_latest_requests.describe() if side.load_latest_requests else "",
        ]
        for side in sides
    ]
    sized = [side for side in sides if side.record_bytes]
    if sized:
        print(
            "Size of our conversation record (the item every write of a turn rewrites; write "
            "units are charged per KB of it): "
            + "; ".join(
                ("what-if" if "what-if" in side.name else "as is")
                + ": "
                + ", ".join(f"{b:,} B at turn {t}" for t, b in side.record_bytes.items())
                for side in sized
            )
            + ".\n"
        )
    print(
        table(
            ["load the latest state of a 500-turn thread", "ms (median of 20)", "requests"],
            load_rows,
            "lrl",
        )
    )
    section("Cost per 1,000 turns (model + tool turns, list prices)", PRICES_NOTE)
    cost_rows = []
    for side in sides:
        cost_rows.append(
            [side.name]
            + [
                f"${cost_per_thousand(side.at(turn)):.4f}" if turn <= len(side.tallies) else "—"
                for turn in CHECKPOINTS
            ]
            + [
                f"{side.at(turn).write_bytes / 1e6:.3f}" if turn <= len(side.tallies) else "—"
                for turn in CHECKPOINTS
            ]
        )
    print(
        table(
            [
                "system",
                *[f"$ at turn {t}" for t in CHECKPOINTS],
                *[f"GB written per 1,000 turns at turn {t}" for t in CHECKPOINTS],
            ],
            cost_rows,
        )
    )
    print(
        "\nGB written per 1,000 turns is what a stored copy would hold if nothing were "
        "overwritten; at S3 Standard's $0.023 per GB-month (DynamoDB Standard $0.25) it "
        "adds to the cost above for as long as it is kept."
    )
    return {
        side.name: {
            str(turn): {
                "requests": dict(side.at(turn).requests),
                "write_bytes": side.at(turn).write_bytes,
                "rcu": side.at(turn).read_units,
                "wcu": side.at(turn).write_units + side.at(turn).index_write_units,
                "storage_ms": side.storage_at(turn),
                "turn_ms": side.turn_at(turn),
                "cost_per_1000": cost_per_thousand(side.at(turn)),
            }
            for turn in CHECKPOINTS
            if turn <= len(side.tallies)
        }
        | {"load_latest_ms": side.load_latest_ms, "record_bytes": side.record_bytes}
        for side in sides
    }


async def run_growth(emulators: Emulators, turns: int = 500) -> tuple[list[Side], bool]:
    sides = [await ours(emulators, turns), await ours(emulators, turns, prune_claims=True)]
    available = langgraph_available()
    if available:
        sides.append(await asyncio.to_thread(theirs, emulators, turns))
    return sides, available
