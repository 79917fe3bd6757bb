"""What a chaos run leaves to check (`bench.chaos.invariants`): the messages and stops sent,
each thread's posts and stored state, the model's calls and the side-effect ledger; and the
readings of posts that several checks share."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bench.chaos.classify import Classified
from bench.chaos.model import CallMade
from storage import Conversation, ConversationKey, ToolCallRecord

KEYED_ATTEMPTS = 3  # the replicas' BOT_IDEMPOTENT_ATTEMPTS
# Each request the keyed service got: {"key", "call_id", "at", "repeated"} (see `soak`).
KeyedLog = list[dict[str, Any]]

EXPLAINING_NOTICES = frozenset(
    {"run_failed", "discarded", "state_expired", "state_incompatible", "state_damaged"}
)

# Notices that close a run's open calls as the ledger says (and name those of unknown outcome).
CLOSING_NOTICES = EXPLAINING_NOTICES | {"stopped"}

EXPIRY_TEXT = "saved state expired:"  # the expiry notice's, not the fail-closed one's

ACTIVITY_SLACK = 2.5  # s: a keep lands after its sending; TTLs are checked to the second

THREAD_TAG = re.compile(r"s\d+t(\d+)m\d+$")

NAMED_CALL = re.compile(r"\(call (call_[a-z0-9]+_\d+)\)")

UNKNOWN_CALLS = re.compile(r"outcome unknown[^.]*?: ((?:`[^`]+` \(call [^)]+\)(?:, )?)+)")


@dataclass
class Violation:
    kind: str
    thread: str
    detail: str


@dataclass
class SentMessage:
    tag: str
    thread: int
    text: str
    user: str
    sent_at: float
    acked: bool = False
    decision: bool = False
    late: bool = False  # meant to arrive after the thread's state expired
    acked_at: float = 0.0  # when it was acked (kept by then)


@dataclass
class StopFacts:
    """A stop someone sent (the Stop control's button, or the reply `stop`) and the private
    answers it may have got: through its response_url (the button), or ephemeral to its
    sender in its thread (the reply), from when it was sent."""

    thread: int
    user: str
    via: str  # button | reply
    moment: str
    sent_at: float
    acked: bool = False
    acked_at: float = 0.0
    answers: list[str] = field(default_factory=list)


@dataclass
class RedeliveredStopFacts:
    """The admin's stop of a thread's run (`StopFacts` has it too), and each time Slack sent
    that same request again (`resent`: when, and the replica's answer)."""

    thread: int
    via: str  # button | reply | session
    moment: str
    again: str  # soon | after_run | next_run
    sent_at: float
    acked: bool
    acked_at: float
    resent: list[dict[str, Any]] = field(default_factory=list)
    answered_before: list[str] = field(default_factory=list)  # privately, before it was resent


@dataclass
class WorkspaceThread:
    """A conversation in the run's second workspace: its key, when its request was acked
    (0: never), and what it ends as."""

    key: ConversationKey
    acked_at: float = 0.0
    record: Conversation | None = None
    notices: list[str] = field(default_factory=list)  # the kinds of notice posted there


@dataclass
class UninstallFacts:
    """The run's second workspace removed the app (`kind`, Slack's event `event_id`): when
    the event was first acked (0: never), each time it was sent again, the reinstall (when
    it began and when it was done; 0: not), the conversations begun before and after, and
    what storage says once quiet."""

    team: str
    kind: str
    event_id: str = ""
    acked_at: float = 0.0
    resent: list[dict[str, Any]] = field(default_factory=list)
    reinstall_began: float = 0.0
    reinstalled_at: float = 0.0
    before: WorkspaceThread | None = None
    after: WorkspaceThread | None = None
    installed: bool = False  # its installation is there at the end
    removal_recorded: bool = False
    removal_finished: bool = False


@dataclass
class HomeDiscardFacts:
    """An admin's Discard from a Home tab that listed the thread stale (`listed`, the
    button's value, taken at `listed_at` from the tab or, when the tab did not show it, as
    the tab lists it from storage), clicked at `clicked_at`; `answer`: the tab's note."""

    thread: int
    listed_at: float
    listed_from: str  # tab | store
    listed: dict[str, Any]
    clicked_at: float = 0.0
    acked: bool = False
    answer: str = ""


@dataclass
class UnsignedFacts:
    """A slow connection to `/slack/events` with a bogus signature, and what it got."""

    url: str
    tag: str
    ends: str  # complete | stall | abandon
    opened_at: float
    closed_at: float = 0.0
    status: int | None = None  # the HTTP status it got, if any
    error: str | None = None


@dataclass
class InFlightSample:
    """A replica's `bot_slack_requests_in_flight` while unsigned connections to it were
    open, taken when the harness had no signed request on its way to it (none before,
    during or after the scrape, and none given up on there in this run)."""

    url: str
    at: float
    value: float
    unsigned_open: int


@dataclass
class ResumeAtCapFacts:
    """A `/resume` of an interrupted thread (`thread`) sent while the model worked on the
    `holder` tag's request (given at `holding_at`): when sent and acked (0: not), its
    response_url's `token` and what it answered there."""

    thread: int
    holder: str
    holding_at: float = 0.0
    sent_at: float = 0.0
    acked_at: float = 0.0
    token: str = ""
    answers: list[str] = field(default_factory=list)


@dataclass
class BotPost:
    at: float
    text: str
    what: Classified


@dataclass
class ThreadFacts:
    index: int
    key: ConversationKey
    dead_channel: bool = False
    discarded: bool = False  # the workload had an admin discard this thread
    posts: list[BotPost] = field(default_factory=list)
    record: Conversation | None = None
    tombstone: Conversation | None = None  # the record of an expired state, if it is that
    items: list[Any] = field(default_factory=list)
    inbox: int = 0
    tool_records: dict[str, ToolCallRecord] = field(default_factory=dict)
    blobs: list[str] = field(default_factory=list)
    approved_clicks: set[str] = field(default_factory=set)
    rejected_clicks: set[str] = field(default_factory=set)
    approve_replies: list[float] = field(default_factory=list)
    reject_replies: list[float] = field(default_factory=list)
    clicks: list[float] = field(default_factory=list)  # when each click or command was acked
    late_clicks: list[float] = field(default_factory=list)


@dataclass
class RunFacts:
    threads: list[ThreadFacts]
    messages: list[SentMessage]
    calls: dict[str, CallMade]  # every call id the model invented for this run
    effects: list[dict[str, Any]]  # the ledger lines of this run
    now: datetime
    interrupting_faults: bool = True  # a process or storage fault struck in this run
    model_faults: bool = True  # a model fault struck in this run
    state_ttl: float | None = None  # the replicas' BOT_STATE_TTL, when short (expiry runs)
    longest_outage: float = 0.0  # s: the longest stretch with no replica serving
    given: dict[str, float] = field(default_factory=dict)  # tag -> when the model got it
    stops: list[StopFacts] = field(default_factory=list)
    # A stop word given to the model as a message: (user, thread index, when).
    stops_given: list[tuple[str, int, float]] = field(default_factory=list)
    # Each request at the keyed service: {"key", "call_id", "at", "repeated"}.
    keyed: list[dict[str, Any]] = field(default_factory=list)
    keyed_attempts: int = KEYED_ATTEMPTS
    strangers: frozenset[str] = frozenset({"UMALLORY"})  # never allowed to stop a run
    # Issue 49's shapes (`bench.chaos.shapes`).
    redelivered_stops: list[RedeliveredStopFacts] = field(default_factory=list)
    uninstall: UninstallFacts | None = None
    home_discards: list[HomeDiscardFacts] = field(default_factory=list)
    unsigned: list[UnsignedFacts] = field(default_factory=list)
    in_flight: list[InFlightSample] = field(default_factory=list)
    unsigned_given: dict[str, float] = field(default_factory=dict)  # their tags the model got
    leaks: list[dict[str, Any]] = field(default_factory=list)  # Slack requests with `MARKER`
    sigstop: bool = False  # a replica was SIGSTOPped in this run
    max_runs: int | None = None  # the replicas' BOT_MAX_RUNS, when small (resume_at_cap)
    # The model server's log of this run: a replica's requests carry `process` and
    # `at_once` (its requests open then, this one included).
    model_requests: list[dict[str, Any]] = field(default_factory=list)
    resumes_at_cap: list[ResumeAtCapFacts] = field(default_factory=list)

    def each_thread(self) -> Iterator[tuple[ThreadFacts, str, list[SentMessage]]]:
        """Each thread of the run, where its violations are found (its key), and the
        messages people sent in it."""
        for thread in self.threads:
            yield thread, str(thread.key), [m for m in self.messages if m.thread == thread.index]


def told_kind(post: BotPost) -> str | None:
    """The notice's kind; `expiry` for the notice of a state that expired (a thread told
    when it came back), which shares its kind with a checkpoint that fails closed."""
    if post.what.notice == "state_expired" and EXPIRY_TEXT in post.text:
        return "expiry"
    return post.what.notice


def thread_of_tag(tag: str) -> int | None:
    """Tags are `s<seed>t<thread>m<message>`."""
    match = THREAD_TAG.match(tag)
    return int(match.group(1)) if match else None


def expired_unserved(facts: RunFacts, thread: ThreadFacts) -> bool:
    """The thread's state expired in an expiry run where no replica served for about its
    TTL (a restart on a loaded machine): nobody could answer what it held, and the bot
    tells a thread of its expiry only when someone acts there afterwards."""
    return (
        facts.state_ttl is not None
        and facts.longest_outage >= facts.state_ttl - ACTIVITY_SLACK
        and thread.record is None
        and thread.tombstone is not None
    )


def stopped_from(facts: RunFacts, thread: ThreadFacts) -> dict[float, float]:
    """Each stopped notice of the thread (its time) and when the first stop it may have
    applied was sent (after the notice before it): an acked one, else one whose ack came
    too late (a frozen replica kept it, and applied it: chaos 190175)."""
    found: dict[float, float] = {}
    previous = 0.0
    for at in sorted(p.at for p in thread.posts if p.what.notice == "stopped"):
        window = [s for s in facts.stops if s.thread == thread.index and previous < s.sent_at <= at]
        sent = [s.sent_at for s in window if s.acked] or [s.sent_at for s in window]
        previous = at
        if sent:
            found[at] = min(sent)
    return found


def unknown_named(posts: list[BotPost]) -> set[str]:
    """Call ids a notice said were of unknown outcome: the outcome-unknown notice, and the
    "Started, outcome unknown" sentence of a notice that closed a run's calls (a guardrail's
    too)."""
    named: set[str] = set()
    for post in posts:
        if post.what.notice == "tool_outcome_unknown":
            named.update(NAMED_CALL.findall(post.text))
        elif post.what.notice in CLOSING_NOTICES or post.what.notice == "guardrail":
            for listed in UNKNOWN_CALLS.findall(post.text):
                named.update(NAMED_CALL.findall(listed))
    return named
