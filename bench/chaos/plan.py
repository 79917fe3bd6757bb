"""One run's workload and fault schedule, drawn from `random.Random(seed)` alone, so that a
seed replays the same run (the same threads, messages, decisions, and faults at the same
moments; what the processes make of them still depends on timing).

Two workloads are drawn from a second generator of the same seed (so that the rest of a
seed's plan is what it was before them): a burst of replies into a busy thread (its first
request makes the model ponder, and dozens of replies, some longer than a DynamoDB record
holds inline, arrive meanwhile; past the replicas' `BOT_BACKLOG_LIMIT` some are refused),
and expiry (the replicas run with a short `BOT_STATE_TTL`, and some threads get a reply, a
mention or a click only after their state expired: paused for approval, or idle).

A third generator of the seed draws the newest workloads: requests that go through the agent
graph (a wire behind a `handoff()`, a claim through an agent used as a tool, a payment at an
MCP server) or a keyed tool (`charge`, with now and then a process fault aimed at the
replica running it, after the keyed service applied it); Stop (the button, or the reply
`stop`; by the thread's starter or an approver, sometimes also by someone not allowed) at a
moment of a run: while the model works, as an approval request appears, right after Approve,
or as the run finishes; and an admin discard right after an approval, while the tool runs.

A fourth generator draws the shapes of issue 49 (`bench.chaos.shapes`): stops and uninstalls
Slack sends again, tools that answer after their client gave up, an output guardrail trip, a
Discard from a stale Home tab, unsigned slow requests, and `/resume` at the run cap."""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from bench.chaos.shapes import (
    REVEAL,
    SLOW,
    HomeDiscardPlan,
    RedeliveredStop,
    ResumeAtCapPlan,
    UninstallPlan,
    UnsignedPlan,
    draw_shapes,
)

PROCESS_FAULTS = ("process:sigkill", "process:sigterm", "process:sigstop", "process:restart")
SLACK_FAULTS = ("slack:429", "slack:5xx", "slack:channel_error", "slack:slow")
MODEL_FAULTS = ("model:500", "model:slow", "model:hang", "model:drop")
STORAGE_FAULTS = {
    "aws": (
        "storage:throttle",
        "storage:5xx",
        "storage:drop_before",
        "storage:drop_after",
        "storage:slow",
    ),
    # A lock held on the sqlite database (writers wait), or the blob directories made
    # immutable (chattr +i: writing a checkpoint fails). Making the database files immutable
    # is not one of them: sqlite's mmapped -shm then kills the process with SIGBUS.
    "local": ("storage:sqlite_lock", "storage:sqlite_lock", "storage:blobs_readonly"),
}
FAMILIES = ("process", "storage", "slack", "model")
STARTERS = ("UALICE", "UBOB")
APPROVER = "UCAROL"
ADMIN = "UADMIN"
STRANGER = "UMALLORY"
WORDS = ("apple", "pear", "kiwi", "plum", "fig", "lime", "date", "yuzu")
PEOPLE = ("bob", "ana", "eve", "joe")
EXPIRY_TTL = 5.0  # seconds of BOT_STATE_TTL in expiry runs: longer than a run under faults
LATE = EXPIRY_TTL + 3.5  # a late action waits this long after the thread's last one
BACKLOG_LIMIT = 24  # the replicas' BOT_BACKLOG_LIMIT: only a burst goes past it
LONG_REPLY = 5_000  # characters: over the 4,000 bytes a queued message may take in a record
PONDER = re.compile(r" \(ponder [0-9.]+s\)")
APPROVAL_REQUESTS = ("transfer ", "wire ", "claim ", "pay ")  # a person must approve these
# Through a handoff, an agent tool, MCP; one the guardrail stops (`bench.chaos.agent.SECRET`).
GRAPH_REQUESTS = ("wire ", "claim ", "pay ", "password ")
StopMoment = Literal["working", "card", "approved", "finishing"]


@dataclass
class Step:
    kind: Literal["say", "resume", "discard"]
    pause: float  # seconds after the previous step
    text: str = ""
    tag: str = ""
    user: str = ""
    mention: bool = False  # a reply that also mentions the bot (app_mention + message)
    late: bool = False  # meant to arrive after the thread's state expired
    burst: bool = False  # one of a burst of replies into a busy thread


@dataclass
class Decision:
    approve: bool
    via: Literal["button", "reply"]
    by: str
    delay: float
    stranger_first: bool = False  # someone not allowed clicks before
    late: bool = False  # meant to arrive after the thread's state expired


@dataclass
class StopPlan:
    """A stop at a moment of the thread's run: when the model is first asked (`working`),
    when an approval request shows (`card`), when someone approved (`approved`), when the
    model gave its final answer (`finishing`); `delay` seconds after it."""

    moment: StopMoment
    via: Literal["button", "reply", "session"]  # session: Slack's own stop on the thread
    by: str
    delay: float


@dataclass
class ThreadPlan:
    index: int
    channel: str
    starter: str
    steps: list[Step]
    decisions: list[Decision]
    stops: list[StopPlan] = field(default_factory=list)
    discard_after_approval: float | None = None  # an admin discards while the tool runs
    held: bool = False  # begun by a shape's player when its moment comes, not by the clock


@dataclass
class FaultPlan:
    at: float  # seconds after the run started
    kind: str  # "family:name"
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        moment = self.params.get("moment", "random")
        return self.kind if moment == "random" else f"{self.kind}({moment})"


@dataclass
class RunPlan:
    seed: int
    backend: str
    replicas: int
    channels: list[str]
    threads: list[ThreadPlan]
    faults: list[FaultPlan]
    window: float  # seconds of workload and faults before everything is healed
    state_ttl: float | None = None  # the replicas' BOT_STATE_TTL in seconds (None: an hour)
    redelivered_stops: list[RedeliveredStop] = field(default_factory=list)
    uninstall: UninstallPlan | None = None  # (its runs serve many workspaces: OAuth)
    home_discards: list[HomeDiscardPlan] = field(default_factory=list)
    unsigned: list[UnsignedPlan] = field(default_factory=list)
    resume_at_cap: ResumeAtCapPlan | None = None  # (its replicas run with a small cap)

    @property
    def fault_kinds(self) -> list[str]:
        return sorted({fault.label for fault in self.faults}) or ["none"]

    @property
    def discards(self) -> bool:
        return any(step.kind == "discard" for t in self.threads for step in t.steps) or any(
            t.discard_after_approval is not None for t in self.threads
        )

    @property
    def workloads(self) -> list[str]:
        """The workloads besides the plain one: `burst`, `expiry`, `stop`,
        `discard_mid_tool`, `agent_graph`, `guardrail`, `keyed`; issue 49's shapes
        `redelivered_stop`, `uninstall`, `slow_tool`, `output_guardrail`,
        `stale_home_discard`, `unsigned_slow`, `resume_at_cap`."""
        steps = [step for t in self.threads for step in t.steps]
        return [
            name
            for name, present in (
                ("burst", any(step.burst for step in steps)),
                ("expiry", self.state_ttl is not None),
                ("stop", any(t.stops for t in self.threads)),
                (
                    "discard_mid_tool",
                    any(t.discard_after_approval is not None for t in self.threads),
                ),
                ("agent_graph", any(step.text.startswith(GRAPH_REQUESTS) for step in steps)),
                ("guardrail", any(step.text.startswith("password ") for step in steps)),
                ("keyed", any(step.text.startswith("charge ") for step in steps)),
                ("redelivered_stop", bool(self.redelivered_stops)),
                ("uninstall", self.uninstall is not None),
                ("slow_tool", any(SLOW in step.text for step in steps)),
                ("output_guardrail", any(REVEAL in step.text for step in steps)),
                ("stale_home_discard", bool(self.home_discards)),
                ("unsigned_slow", bool(self.unsigned)),
                ("resume_at_cap", self.resume_at_cap is not None),
            )
            if present
        ]

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def make_plan(
    seed: int, backend: str, *, replicas: str = "auto", families: tuple[str, ...] = FAMILIES
) -> RunPlan:
    rng = random.Random(seed)
    count = rng.choice((1, 2, 2)) if replicas == "auto" else int(replicas)
    channels = [f"CS{seed}A", f"CS{seed}B"]
    threads = [
        _thread(rng, seed, index, rng.choice(channels)) for index in range(rng.randint(2, 4))
    ]
    if rng.random() < 0.2:  # now and then an admin discards one thread
        victim = rng.choice(threads)
        victim.steps.append(Step("discard", rng.uniform(0.5, 2.5), user=ADMIN))
    window = 7.0
    faults: list[FaultPlan] = []
    if rng.random() >= 0.08:  # a few runs have no fault: the baseline
        for _ in range(rng.choice((1, 1, 2, 2, 3))):
            family = rng.choice(families)
            kinds = {
                "process": PROCESS_FAULTS,
                "storage": STORAGE_FAULTS[backend],
                "slack": SLACK_FAULTS,
                "model": MODEL_FAULTS,
            }[family]
            kind = rng.choice(kinds)
            faults.append(FaultPlan(round(rng.uniform(0.3, 5.5), 2), kind))
    for fault in faults:
        fault.params = _fault_params(rng, fault.kind, count, channels)
    faults.sort(key=lambda f: f.at)
    plan = RunPlan(seed, backend, count, channels, threads, faults, window)
    _more_workloads(random.Random(seed * 7907 + 17), plan)
    _newest_workloads(random.Random(seed * 7927 + 31), plan)
    draw_shapes(random.Random(seed * 7933 + 43), plan)
    return plan


def _more_workloads(rng: random.Random, plan: RunPlan) -> None:
    if rng.random() < 0.35:
        _burst(rng, plan.seed, rng.choice(plan.threads))
    if rng.random() < 0.35:
        plan.state_ttl = EXPIRY_TTL
        for thread in rng.sample(plan.threads, rng.randint(1, min(2, len(plan.threads)))):
            _late(rng, plan.seed, thread)


def _newest_workloads(rng: random.Random, plan: RunPlan) -> None:
    """Requests through the agent graph and keyed ones, stops, a discard mid-tool."""
    for thread in plan.threads:
        for step in thread.steps:
            if step.kind == "say" and not (step.burst or step.late) and rng.random() < 0.3:
                step.text = _graph_request(rng, step)
    _keyed_fault(rng, plan)
    for thread in plan.threads:
        if rng.random() < 0.3:
            _stops(rng, thread)
    if rng.random() < 0.12:
        approving = [t for t in plan.threads if _asks_approval(t)]
        if approving:
            rng.choice(approving).discard_after_approval = round(rng.uniform(0.05, 0.6), 3)


def _graph_request(rng: random.Random, step: Step) -> str:
    amount, person = rng.randint(1, 99), rng.choice(PEOPLE)
    request = rng.choice(
        (
            f"wire {amount} to {person}",
            f"claim {amount} for {person}",
            f"pay {amount} to {person}",
            f"password {rng.choice(WORDS)}{amount}",
            f"charge {amount}",
            f"charge {amount}",
        )
    )
    ponder = PONDER.search(step.text)
    return f"{request}{ponder.group(0) if ponder else ''} #{step.tag}"


def _keyed_fault(rng: random.Random, plan: RunPlan) -> None:
    """Now and then a process fault aimed at the replica running a keyed call, just after
    the service applied its key (waited for from a little before the request is sent)."""
    charged = [
        (thread, sum(s.pause for s in thread.steps[: number + 1]))
        for thread in plan.threads
        for number, step in enumerate(thread.steps)
        if step.text.startswith("charge ")
    ]
    if not charged or rng.random() >= 0.4:
        return
    _, sent = rng.choice(charged)
    kind = rng.choice(("process:sigkill", "process:sigkill", "process:sigterm", "process:sigstop"))
    params: dict[str, Any] = {
        "slot": rng.randrange(plan.replicas),
        "moment": "mid_keyed",
        "delay": round(rng.uniform(0.0, 0.3), 3),
    }
    if kind == "process:sigstop":
        params["seconds"] = round(rng.uniform(3.0, 4.5), 2)
    else:
        params["restart_after"] = round(rng.uniform(0.2, 2.0), 2)
    plan.faults.append(FaultPlan(round(max(0.2, sent - 0.3), 2), kind, params))
    plan.faults.sort(key=lambda f: f.at)


def _stops(rng: random.Random, thread: ThreadPlan) -> None:
    moments: list[StopMoment] = ["working", "finishing"]
    if _asks_approval(thread):
        moments += ["card", "approved", "card", "approved"]
    by = thread.starter if rng.random() < 0.85 else APPROVER
    people = [by] + ([STRANGER] if rng.random() < 0.3 else [])
    for person in people:
        moment = rng.choice(moments)
        delay = {
            "working": rng.uniform(0.2, 1.2),
            "card": rng.uniform(0.0, 0.4),
            "approved": rng.uniform(0.0, 0.3),
            "finishing": rng.uniform(0.0, 0.15),
        }[moment]
        via: Literal["button", "reply"] = rng.choice(("button", "reply"))
        thread.stops.append(StopPlan(moment, via, person, round(delay, 3)))
        first = thread.steps[0]
        if moment == "working" and not PONDER.search(first.text):  # the model works a while
            first.text = first.text.replace(" #", f" (ponder {rng.uniform(1.5, 2.5):.1f}s) #", 1)


def _asks_approval(thread: ThreadPlan) -> bool:
    return any(s.kind == "say" and s.text.startswith(APPROVAL_REQUESTS) for s in thread.steps)


def _burst(rng: random.Random, seed: int, thread: ThreadPlan) -> None:
    """Right after the thread's first request (which the model ponders over), a burst of
    replies, some of them long; each names its tag first, where a notice's quote shows it."""
    first = thread.steps[0]
    first.text = first.text.replace(" #", f" (ponder {rng.uniform(1.5, 2.5):.1f}s) #", 1)
    count = rng.randint(12, 40)
    burst = []
    for number in range(count):
        tag = f"s{seed}t{thread.index}m{100 + number}"
        body = rng.choice(WORDS)
        if rng.random() < 0.25:
            body = " ".join([body] * (LONG_REPLY // (len(body) + 1) + 1))
        user = thread.starter if rng.random() < 0.7 else APPROVER
        pause = rng.uniform(0.2, 0.4) if number == 0 else rng.uniform(0.0, 0.03)
        burst.append(Step("say", pause, f"#{tag} {body}", tag, user, burst=True))
    thread.steps[1:1] = burst


def _late(rng: random.Random, seed: int, thread: ThreadPlan) -> None:
    """After a quiet spell past the TTL, a reply or a mention; now and then the thread's
    first approval is clicked that late too (paused all along)."""
    if rng.random() < 0.5:
        thread.decisions[0].delay = LATE + rng.uniform(0.0, 1.0)
        thread.decisions[0].via = "button"
        thread.decisions[0].late = True
    tag = f"s{seed}t{thread.index}m{200}"
    mention = rng.random() < 0.4
    text = f"{'and' if not mention else 'again'} {rng.choice(WORDS)}? #{tag}"
    pause = LATE + rng.uniform(0.0, 1.0)
    thread.steps.append(Step("say", pause, text, tag, thread.starter, mention, late=True))


def _thread(rng: random.Random, seed: int, index: int, channel: str) -> ThreadPlan:
    starter = rng.choice(STARTERS)
    steps = [Step("say", rng.uniform(0.0, 1.0), user=starter, mention=True)]
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        if roll < 0.9:
            user = starter if rng.random() < 0.8 else APPROVER
            steps.append(Step("say", rng.uniform(0.3, 2.0), user=user, mention=rng.random() < 0.3))
        else:
            steps.append(Step("resume", rng.uniform(0.3, 2.0), user=starter))
    for number, step in enumerate(s for s in steps if s.kind == "say"):
        step.tag = f"s{seed}t{index}m{number}"
        step.text = _request(rng, step.tag, first=number == 0)
    decisions = [
        Decision(
            approve=rng.random() < 0.8,
            via="button" if rng.random() < 0.65 else "reply",
            by=starter if rng.random() < 0.85 else APPROVER,
            delay=rng.uniform(0.2, 1.5),
            stranger_first=rng.random() < 0.1,
        )
        for _ in range(6)
    ]
    return ThreadPlan(index, channel, starter, steps, decisions)


def _request(rng: random.Random, tag: str, *, first: bool) -> str:
    roll = rng.random()
    word = rng.choice(WORDS)
    if roll < 0.35:
        return f"transfer {rng.randint(1, 99)} to {rng.choice(PEOPLE)} #{tag}"
    if roll < 0.55:
        return f"note {word} #{tag}"
    if roll < 0.62:
        return f"lookup {word} #{tag}"
    return f"{'hello' if first else 'and'} {word}? #{tag}"


def _fault_params(
    rng: random.Random, kind: str, replicas: int, channels: list[str]
) -> dict[str, Any]:
    slot = rng.randrange(replicas)
    match kind:
        case "process:sigkill" | "process:sigterm":
            # At a random moment; while a transfer runs (after its approval, within the
            # tool's delay); or right after the replica acked a Slack request.
            moment = rng.choice(("random", "random", "mid_tool", "after_ack"))
            return {
                "slot": slot,
                "restart_after": round(rng.uniform(0.2, 3.0), 2),
                "moment": moment,
                "delay": round(
                    rng.uniform(0.15, 0.5) if moment == "mid_tool" else rng.uniform(0.0, 0.05), 3
                ),
            }
        case "process:sigstop":
            return {"slot": slot, "seconds": round(rng.uniform(3.0, 4.5), 2)}
        case "process:restart":
            return {"slot": slot}
        case "storage:throttle" | "storage:5xx" | "storage:drop_before" | "storage:drop_after":
            return _storage_params(rng)
        case "storage:slow":
            return {**_storage_params(rng), "latency": round(rng.uniform(0.2, 1.2), 2)}
        case "storage:sqlite_lock":
            return {"seconds": round(rng.uniform(0.5, 4.0), 2)}
        case "storage:blobs_readonly":
            return {"seconds": round(rng.uniform(1.0, 3.0), 2)}
        case "slack:429":
            return {
                "methods": rng.choice((["chat.postMessage"], None)),
                "times": rng.randint(1, 4),
                "retry_after": 1,
            }
        case "slack:5xx":
            return {
                "methods": rng.choice((["chat.postMessage"], None)),
                "times": rng.randint(1, 4),
                "status": rng.choice((500, 503)),
            }
        case "slack:channel_error":
            return {
                "channel": rng.choice(channels),
                "error": rng.choice(("not_in_channel", "channel_not_found")),
            }
        case "slack:slow":
            return {
                "seconds": round(rng.uniform(2.0, 4.0), 2),
                "latency": round(rng.uniform(0.5, 2.5), 2),
            }
        case "model:500":
            return {"times": rng.randint(1, 4)}
        case "model:slow":
            return {
                "seconds": round(rng.uniform(2.0, 4.0), 2),
                "latency": round(rng.uniform(1.0, 3.0), 2),
            }
        case "model:hang":
            return {"seconds": round(rng.uniform(3.0, 5.0), 2)}
        case "model:drop":
            return {"times": rng.randint(1, 3), "latency": round(rng.uniform(0.5, 2.0), 2)}
    raise ValueError(kind)


def _storage_params(rng: random.Random) -> dict[str, Any]:
    service = "s3" if rng.random() < 0.3 else "dynamodb"
    operations = (
        ("PutObject", "GetObject")
        if service == "s3"
        else ("TransactWriteItems", "UpdateItem", "PutItem", "GetItem", "Query")
    )
    params: dict[str, Any] = {
        "service": service,
        "operation": rng.choice(operations) if rng.random() < 0.5 else None,
        "probability": rng.choice((1.0, 1.0, 0.5)),
    }
    if rng.random() < 0.5:
        params["times"] = rng.randint(1, 3)  # for a moment
    else:
        params["seconds"] = round(rng.uniform(1.0, 4.0), 2)  # for a while
    return params
