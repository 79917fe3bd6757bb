"""The promises checked after each run, once faults are healed and the system is quiet, from
what is visible outside the bot: the stand-in's recorded posts, the side-effect ledger file,
and the storage (records, session items, inbox, tool ledger, checkpoint blob keys).

Kinds of violation:

  message_unanswered         a delivered user message got no answer quoting its tag and its
                             thread no notice saying why (run failed, discarded, state set
                             aside; an approval request posted since, the thread still
                             awaiting it; not taken, the backlog being full; dropped by an
                             expiry): the last two must name it, or count it among those
                             they say they could not name
  not_taken_but_given        a message a notice said was not taken was given to the model
  expiry_untold              an action came after the thread's state surely expired (nothing
                             for longer than the TTL), and no notice told the thread
  expiry_told_twice          two expiry notices in a thread closer than the TTL (a state that
                             came back lasts at least a TTL)
  tool_ran_after_expiry      a call the model asked for before an expiry notice ran after it
  effect_duplicated          a side effect ran more than once for one call id
  effect_without_approval    a transfer ran that no allowed person approved
  decision_not_honoured      a call was reported rejected that nobody rejected
  notice_contradicts_ledger  a post says a call ran / failed / was not run, and the effect
                             ledger says otherwise
  record_contradicts_ledger  the stored history or tool ledger says so (what the model sees,
                             and what a later replay returns)
  unknown_outcome_unannounced a call ended "outcome unknown" without a notice naming it (a
                             channel that fails permanently cannot be told)
  unknown_outcome_uncaused   a call ended "outcome unknown" in a run where nothing could
                             have interrupted it (no process or storage fault, no discard)
  answer_posted_twice        one answer posted twice, or one message answered by two runs
  approval_posted_twice      one approval request (call, checkpoint version) posted twice
  thread_left_running        a thread still `running` once quiet (e.g. a delivery retried for
                             ever)
  thread_left_leased         a thread still holding an unexpired lease once quiet
  session_turn_duplicated    the session holds a message, call, output or answer twice
  stale_fence_checkpoint     a checkpoint committed after a newer fence had committed one
  stop_unanswered            an acked stop neither applied (a stopped notice after it, or a
                             discarded one before anything else of its run) nor
                             answered (privately: it had already finished, it was already
                             stopped, nothing runs there, refused; the reply `stop` while
                             nothing ran: given to the model as a message; an expiry notice)
  stopped_run_went_on        after a stopped notice, the stopped run posted an answer, an
                             approval request or a decision, or one of its calls took effect
                             (unless a notice said its outcome was unknown, or it finished late)
  refused_stop_honoured      a stop from someone not allowed stopped the run, or its `stop`
                             reached the model after it was refused
  keyed_not_applied_once     a keyed call whose run finished (its thread got the answer, or a
                             notice said it completed after a restart) was applied by the
                             service other than once
  keyed_outcome_unknown      a finished run's thread says a keyed call's outcome is unknown,
                             the service applied it, and its attempts were not spent
  keyed_key_shared           one idempotency key was sent for two calls
  guardrail_read_as_failure  a request the guardrail stops (it names a password), never given
                             to the model, explained by a failure notice and no guardrail
                             notice, in a run without a process, storage or model fault

Side effects are those of `bench.chaos.agent`: the ledger file's lines, the MCP server's
`pay` lines, and the keys the keyed service applied (each an effect of the call it names)."""

from __future__ import annotations

import itertools
import re
from collections import Counter, defaultdict
from typing import Any

from bench.chaos.agent import SECRET
from bench.chaos.classify import PostKind
from bench.chaos.facts import (
    ACTIVITY_SLACK,
    CLOSING_NOTICES,
    EXPLAINING_NOTICES,
    NAMED_CALL,
    UNKNOWN_CALLS,
    BotPost,
    RunFacts,
    SentMessage,
    ThreadFacts,
    Violation,
    expired_unserved,
    stopped_from,
    thread_of_tag,
    told_kind,
    unknown_named,
)
from bench.chaos.model import (
    ANSWER,
    CALL_FATE,
    HANDOFF,
    TAG,
    CallMade,
    content_text,
    output_fate,
)
from bench.chaos.stop_checks import check_stops
from storage import Status, ToolCallStatus
from storage.models import utcnow

# Notices that explain every message before them; the expiry and not-taken notices explain
# only the messages they name or count.
# (A `state_expired` notice is either the expiry's, or a checkpoint older than the TTL that
# fails closed, as before: that one explains everything before it.)
# (A guardrail's notice explains the messages its tripped turn took: all those before it
# that no answer quotes.)
MESSAGE_EXPLAINING = EXPLAINING_NOTICES | {"guardrail"}
# (A stop drops the messages held for its run: its notice names them, and counts them all.)
NAMING_NOTICES = frozenset({"expiry", "not_taken", "stopped"})
NAMED_COUNT = (  # how many messages a naming notice says it is about
    re.compile(r"I couldn't take (\d+) messages?"),
    re.compile(r"(\d+) messages? sent here (?:were|was) not answered"),
    re.compile(r"(\d+) messages? sent for this run (?:were|was) not answered"),
)
NOT_EFFECTS = frozenset({"lookup", "ask_clerk", HANDOFF})  # (the agent tool's own calls are)
APPROVED_TOOLS = frozenset({"transfer", "wire", "file_claim", "pay"})  # a person approves
KEYED_TOOLS = frozenset({"charge"})
LATE = re.compile(r"\(call (call_[a-z0-9]+_\d+)\) finished after .*? Its result:\s*(.*)", re.S)
BLOB = re.compile(r"/v(\d+)-f(\d+)-[0-9a-f]+\.json\.gz$")
KINDS = (
    "message_unanswered",
    "not_taken_but_given",
    "expiry_untold",
    "expiry_told_twice",
    "tool_ran_after_expiry",
    "effect_duplicated",
    "effect_without_approval",
    "decision_not_honoured",
    "notice_contradicts_ledger",
    "record_contradicts_ledger",
    "unknown_outcome_unannounced",
    "unknown_outcome_uncaused",
    "answer_posted_twice",
    "approval_posted_twice",
    "thread_left_running",
    "thread_left_leased",
    "session_turn_duplicated",
    "stale_fence_checkpoint",
    "stop_unanswered",
    "stopped_run_went_on",
    "refused_stop_honoured",
    "keyed_not_applied_once",
    "keyed_outcome_unknown",
    "keyed_key_shared",
    "guardrail_read_as_failure",
)


def check(facts: RunFacts) -> list[Violation]:
    effects = Counter(str(line["call_id"]) for line in facts.effects)
    found: list[Violation] = []
    for thread in facts.threads:
        where = str(thread.key)
        messages = [m for m in facts.messages if m.thread == thread.index]
        found += [
            Violation(kind, where, detail)
            for kind, detail in _thread(thread, messages, facts.given, stopped_from(facts, thread))
            if kind != "message_unanswered" or not expired_unserved(facts, thread)
        ]
        found += [
            Violation(kind, where, detail)
            for kind, detail in _told(thread, messages, facts, effects)
        ]
        found += [
            Violation(kind, where, detail)
            for kind, detail in _calls(thread, facts.calls, effects, facts.interrupting_faults)
        ]
        stops = [s for s in facts.stops if s.thread == thread.index]
        found += [
            Violation(kind, where, detail)
            for kind, detail in check_stops(thread, stops, messages, facts)
        ]
        found += [Violation(kind, where, detail) for kind, detail in _keyed(thread, facts, effects)]
        found += [
            Violation(kind, where, detail) for kind, detail in _guardrail(thread, messages, facts)
        ]
    found += [Violation(kind, "(keyed service)", d) for kind, d in _shared_keys(facts)]
    return found


def _thread(
    thread: ThreadFacts,
    messages: list[SentMessage],
    facts_given: dict[str, float],
    stopped: dict[float, float] | None = None,
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    answers = [p for p in thread.posts if p.what.kind is PostKind.ANSWER]
    notices = [p for p in thread.posts if p.what.kind is PostKind.NOTICE]
    record = thread.record
    # Paused for approval, or paused when its state expired (nothing in the thread since).
    last = record or thread.tombstone
    awaiting = last is not None and last.status is Status.AWAITING_APPROVAL
    unexplained: list[SentMessage] = []
    if not thread.dead_channel:
        for message in messages:
            if message.decision or not message.acked:
                continue
            pattern = re.compile(rf"#{re.escape(message.tag)}\b")
            if any(pattern.search(p.text) for p in answers):
                continue
            if awaiting and any(
                p.what.kind is PostKind.APPROVAL_REQUEST and p.at >= message.sent_at
                for p in thread.posts
            ):
                continue  # the run it joined waits for a person, and the thread says so
            later = [told_kind(n) for n in notices if n.at >= message.sent_at]
            if any(kind in MESSAGE_EXPLAINING for kind in later):
                continue
            if any(message.acked_at <= stop for stop in (stopped or {}).values()):
                continue  # a stop sent after it ended its run (what came after is served)
            given = facts_given.get(message.tag)
            if given is not None and any(given < at for at in (stopped or {})):
                continue  # the stopped run had it: its notice tells what became of it
            if awaiting and "message_kept" in later:
                continue  # kept for after the pending approval, and the thread says so
            if any(
                told_kind(n) in NAMING_NOTICES and pattern.search(n.text)
                for n in notices
                if n.at >= message.sent_at
            ):
                continue  # named: not taken (the backlog is full), or dropped by an expiry
            given = facts_given.get(message.tag)
            if given is not None and any(
                told_kind(n) == "expiry" and n.at > given for n in notices
            ):
                continue  # the expired state's run had it: the notice says what became of it
            unexplained.append(message)
        status = last.status.value if last else "no record"
        out += [
            (
                "message_unanswered",
                f"#{m.tag} {m.text[:80]!r} (thread {status}, inbox {thread.inbox})",
            )
            for m in _uncounted(unexplained, notices)
        ]
    # Posted twice: by outbox id when the bot sends one, else by content.
    outbox = Counter(p.what.outbox_id for p in thread.posts if p.what.outbox_id)
    out += [("answer_posted_twice", f"outbox {o} posted {n}x") for o, n in outbox.items() if n > 1]
    responses = Counter(m.group(1) for p in answers if (m := ANSWER.search(p.text)))
    out += [
        ("answer_posted_twice", f"answer [resp {r}] posted {n}x")
        for r, n in responses.items()
        if n > 1
    ]
    by_tag: dict[str, set[str]] = defaultdict(set)
    for post in answers:
        response = ANSWER.search(post.text)
        for tag in TAG.findall(post.text):
            by_tag[tag].add(response.group(1) if response else post.text)
    out += [
        ("answer_posted_twice", f"#{tag} answered by {len(r)} runs: {sorted(r)}")
        for tag, r in by_tag.items()
        if len(r) > 1
    ]
    requests = Counter(
        (p.what.call_ids, p.what.version)
        for p in thread.posts
        if p.what.kind is PostKind.APPROVAL_REQUEST and not p.what.reminder
    )
    out += [
        ("approval_posted_twice", f"approval request {calls} v{version} posted {n}x")
        for (calls, version), n in requests.items()
        if n > 1
    ]
    if record is not None:
        if record.status is Status.RUNNING:
            why = " (its channel fails permanently)" if thread.dead_channel else ""
            out.append(("thread_left_running", f"status running, inbox {thread.inbox}{why}"))
        if record.lease_owner and record.lease_expires_at and record.lease_expires_at > utcnow():
            out.append(("thread_left_leased", f"leased by {record.lease_owner}"))
    out += [("session_turn_duplicated", d) for d in _session_duplicates(thread.items)]
    # Blob keys do not name the generation: a thread that came back after an expiry counts
    # its versions from 1 again under higher fences, so only a thread never expired is read.
    if not any(told_kind(n) == "expiry" for n in notices):
        out += [("stale_fence_checkpoint", d) for d in _fence_regressions(thread.blobs)]
    return out


def _calls(
    thread: ThreadFacts,
    calls: dict[str, CallMade],
    effects: Counter[str],
    interrupting_faults: bool,
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    mine = {c: made for c, made in calls.items() if thread_of_tag(made.tag) == thread.index}
    said_unknown = unknown_named(thread.posts)
    outputs: dict[str, str] = {}
    for item in thread.items:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            outputs[str(item.get("call_id"))] = content_text(item.get("output"))
    unknown_notices = " ".join(
        p.text
        for p in thread.posts
        if p.what.notice == "tool_outcome_unknown"
        or (p.what.notice in CLOSING_NOTICES and "outcome unknown" in p.text)
    )
    for call_id, made in mine.items():
        ran = effects.get(call_id, 0)
        if made.tool in NOT_EFFECTS:
            continue
        if ran > 1:
            out.append(("effect_duplicated", f"{made.tool} {call_id} ran {ran}x"))
        if made.tool in APPROVED_TOOLS:
            approved = call_id in thread.approved_clicks or any(
                t > made.at for t in thread.approve_replies
            )
            rejected = call_id in thread.rejected_clicks or any(
                t > made.at for t in thread.reject_replies
            )
            if ran and not approved:
                out.append(
                    ("effect_without_approval", f"{made.tool} {call_id} ran, never approved")
                )
        else:
            rejected = False
        said = outputs.get(call_id)
        if said is not None:
            fate = output_fate(said)
            if fate == "rejected" and not rejected:
                out.append(("decision_not_honoured", f"{call_id} reported rejected"))
            if (fate == "ran" and not ran) or (fate in ("failed", "rejected", "not_run") and ran):
                out.append(
                    (
                        "record_contradicts_ledger",
                        f"history says {call_id} {fate}; it ran {ran}x: {said[:80]!r}",
                    )
                )
            if fate == "unknown" and call_id not in unknown_notices and not thread.dead_channel:
                out.append(("unknown_outcome_unannounced", f"{call_id} ended outcome unknown"))
            if fate == "unknown" and not (interrupting_faults or thread.discarded):
                out.append(("unknown_outcome_uncaused", f"{call_id} ended outcome unknown"))
            if fate == "not_run" and ran:
                for post in thread.posts:
                    if post.what.notice in CLOSING_NOTICES and made.tool in post.text:
                        out.append(
                            (
                                "notice_contradicts_ledger",
                                f"notice says `{made.tool}` was not run; {call_id} ran: "
                                f"{post.text[:100]!r}",
                            )
                        )
        record = thread.tool_records.get(call_id)
        if record is not None and record.status is ToolCallStatus.COMPLETED:
            recorded = output_fate(record.output or "")
            if (recorded == "ran" and not ran) or (recorded == "failed" and ran):
                out.append(
                    (
                        "record_contradicts_ledger",
                        f"tool ledger says {call_id} {recorded}; it ran {ran}x: "
                        f"{(record.output or '')[:80]!r}",
                    )
                )
        if record is not None and record.status is ToolCallStatus.CANCELLED and ran:
            out.append(
                ("record_contradicts_ledger", f"tool ledger says {call_id} cancelled; it ran")
            )
        finished = thread.record is not None and thread.record.status in (
            Status.IDLE,
            Status.DISCARDED,
        )
        if (
            record is not None
            and record.status is ToolCallStatus.STARTED
            and finished
            and call_id not in outputs  # (those the history has are checked above)
            and call_id not in said_unknown
            and not thread.dead_channel
        ):
            out.append(
                (
                    "unknown_outcome_unannounced",
                    f"{call_id} left started in the ledger, its run over; no notice names it",
                )
            )
    out += _notices_against_ledger(thread, mine, effects, said_unknown)
    for post in thread.posts:
        if post.what.kind is not PostKind.ANSWER:
            continue
        for call_id, fate in CALL_FATE.findall(post.text):
            ran = effects.get(call_id, 0)
            if (fate == "ran" and not ran) or (fate in ("failed", "rejected", "not_run") and ran):
                out.append(
                    (
                        "notice_contradicts_ledger",
                        f"answer says {call_id} {fate}; it ran {ran}x",
                    )
                )
    return out


def _uncounted(messages: list[SentMessage], notices: list[BotPost]) -> list[SentMessage]:
    """Messages no naming notice named, less those a later one counts without naming them
    (it says how many, and quotes only the first few): each such place covers one."""
    spare: list[list[float]] = []  # [time, places left] per naming notice
    for notice in notices:
        if told_kind(notice) not in NAMING_NOTICES:
            continue
        said = sum(int(m.group(1)) for p in NAMED_COUNT if (m := p.search(notice.text)))
        named = len(set(TAG.findall(notice.text)))
        if said > named:
            spare.append([notice.at, float(said - named)])
    spare.sort()
    left = []
    for message in sorted(messages, key=lambda m: m.sent_at):
        place = next((p for p in spare if p[0] >= message.sent_at and p[1] > 0), None)
        if place is None:
            left.append(message)
        else:
            place[1] -= 1
    return left


def _told(
    thread: ThreadFacts, messages: list[SentMessage], facts: RunFacts, effects: Counter[str]
) -> list[tuple[str, str]]:
    """Backlog and expiry notices against what happened: a message named as not taken was
    never given to the model; an action after a sure expiry got the thread told, once per
    expiry; nothing asked before an expiry ran after it was told."""
    out: list[tuple[str, str]] = []
    posts = thread.posts
    for notice in (p for p in posts if p.what.notice == "not_taken"):
        for tag in TAG.findall(notice.text):
            if tag in facts.given:
                out.append(("not_taken_but_given", f"#{tag} was named as not taken"))
    expiries = sorted(p.at for p in posts if told_kind(p) == "expiry")
    ttl = facts.state_ttl
    if ttl is not None:
        out += [
            ("expiry_told_twice", f"expiry notices {later - earlier:.1f}s apart")
            for earlier, later in itertools.pairwise(expiries)
            if later - earlier < ttl
        ]
        if not thread.dead_channel:
            out += [
                ("expiry_untold", f"{what} {at - since:.1f}s after the thread's last activity")
                for what, at, since in _late_actions(thread, messages)
                if at - since > ttl + ACTIVITY_SLACK and not any(e >= at for e in expiries)
            ]
    if expiries:
        lines = {str(line["call_id"]): float(line.get("time", 0)) for line in facts.effects}
        for call_id, made in facts.calls.items():
            ran_at = lines.get(call_id)
            if thread_of_tag(made.tag) != thread.index or ran_at is None:
                continue
            if any(made.at < told < ran_at for told in expiries):
                out.append(("tool_ran_after_expiry", f"{made.tool} {call_id} asked before"))
    return out


def _late_actions(
    thread: ThreadFacts, messages: list[SentMessage]
) -> list[tuple[str, float, float]]:
    """(what, when, the thread's last activity before) of each late action that was acked."""
    moments = sorted(
        [p.at for p in thread.posts]
        + [m.acked_at or m.sent_at for m in messages if m.acked]
        + thread.clicks
    )
    actions = [(f"late #{m.tag}", m.sent_at) for m in messages if m.late and m.acked]
    actions += [("late click", at) for at in thread.late_clicks]
    found = []
    for what, at in actions:
        before = [t for t in moments if t < at]
        if before:
            found.append((what, at, before[-1]))
    return found


def _session_duplicates(items: list[Any]) -> list[str]:
    seen: Counter[str] = Counter()
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type") or item.get("role")
        if item.get("role") == "user":
            text = content_text(item.get("content"))
            if TAG.search(text):  # decision words may legitimately repeat
                seen[f"user message {text[:60]!r}"] += 1
        elif kind in ("function_call", "function_call_output"):
            seen[f"{kind} {item.get('call_id')}"] += 1
        elif item.get("role") == "assistant":
            seen[f"answer {content_text(item.get('content'))[:60]!r}"] += 1
    return [f"{what} stored {n}x" for what, n in seen.items() if n > 1]


def _fence_regressions(blobs: list[str]) -> list[str]:
    """Committed versions are written under non-decreasing fences. Blob keys name
    `v<version>-f<fence>`; orphans blur which blob of a version was committed, so flag only a
    certain regression: every blob of version v-1 has a higher fence than every blob of v."""
    fences: dict[int, set[int]] = defaultdict(set)
    for key in blobs:
        match = BLOB.search(key)
        if match:
            fences[int(match.group(1))].add(int(match.group(2)))
    return [
        f"v{version} written by fence {sorted(fences[version])} after v{version - 1} by "
        f"fence {sorted(fences[version - 1])}"
        for version in sorted(fences)
        if version - 1 in fences and min(fences[version - 1]) > max(fences[version])
    ]


def _notices_against_ledger(
    thread: ThreadFacts, mine: dict[str, CallMade], effects: Counter[str], said_unknown: set[str]
) -> list[tuple[str, str]]:
    """A late result's notice tells what the call did; "outcome unknown" is said only of a
    call that started (the ledger has it, not cancelled); "completed after a restart" only of
    one that took effect."""
    out: list[tuple[str, str]] = []
    expired = any(told_kind(p) == "expiry" for p in thread.posts)
    for post in thread.posts:
        late = LATE.search(post.text) if post.what.notice == "tool_finished_late" else None
        if late is not None and late.group(1) in mine:
            call_id, result = late.group(1), late.group(2).lstrip("• ").strip()
            fate, ran = output_fate(result), effects.get(late.group(1), 0)
            if (fate == "ran" and not ran) or (fate in ("failed", "not_run") and ran):
                out.append(
                    (
                        "notice_contradicts_ledger",
                        f"late result says {call_id} {fate}; it ran {ran}x: {result[:80]!r}",
                    )
                )
        if post.what.notice == "tool_completed_after_restart":
            for call_id in NAMED_CALL.findall(post.text):
                if call_id in mine and "completed." in post.text and not effects.get(call_id):
                    out.append(("notice_contradicts_ledger", f"{call_id} completed; it never ran"))
    if expired or thread.record is None:
        return out  # a state that expired took its tool ledger with it
    never_ran = {  # told later: a stop kept it from starting after a discard said unknown
        call
        for p in thread.posts
        if p.what.notice == "tool_finished_late" and "never ran" in p.text
        for call in NAMED_CALL.findall(p.text)
    }
    for call_id in sorted(said_unknown & set(mine)):
        record = thread.tool_records.get(call_id)
        cancelled = record is not None and record.status is ToolCallStatus.CANCELLED
        if record is None or (cancelled and call_id not in never_ran):
            state = "cancelled" if record is not None else "never started"
            out.append(
                ("notice_contradicts_ledger", f"{call_id} said unknown; the ledger: {state}")
            )
    return out


def _keyed(thread: ThreadFacts, facts: RunFacts, effects: Counter[str]) -> list[tuple[str, str]]:
    """A keyed call whose run finished was applied exactly once; its thread never says its
    outcome is unknown while the service applied it and it had attempts left."""
    out: list[tuple[str, str]] = []
    answered: dict[str, str] = {}
    for post in thread.posts:
        if post.what.kind is PostKind.ANSWER:
            answered.update(CALL_FATE.findall(post.text))
    completed = {
        call
        for p in thread.posts
        if p.what.notice == "tool_completed_after_restart" and "completed." in p.text
        for call in NAMED_CALL.findall(p.text)
    }
    closed = set()  # said unknown by a stop or a discard: that run did not finish
    for post in thread.posts:
        if post.what.notice in CLOSING_NOTICES:
            for listed in UNKNOWN_CALLS.findall(post.text):
                closed.update(NAMED_CALL.findall(listed))
    said_unknown = unknown_named(thread.posts)
    for call_id, made in facts.calls.items():
        if made.tool not in KEYED_TOOLS or thread_of_tag(made.tag) != thread.index:
            continue
        applied = effects.get(call_id, 0)
        fate = answered.get(call_id)
        if (fate == "ran" or call_id in completed) and applied != 1:
            out.append(
                (
                    "keyed_not_applied_once",
                    f"{call_id} finished ({fate or 'completed after a restart'}); "
                    f"the service applied it {applied}x",
                )
            )
        unknown = fate == "unknown" or call_id in said_unknown
        record = thread.tool_records.get(call_id)
        attempts = record.attempts if record is not None else 0
        if (
            fate is not None
            and unknown
            and applied
            and call_id not in closed
            and attempts < facts.keyed_attempts
        ):
            out.append(
                (
                    "keyed_outcome_unknown",
                    f"{call_id} said unknown after {attempts} attempt(s); the service applied it",
                )
            )
    return out


def _guardrail(
    thread: ThreadFacts, messages: list[SentMessage], facts: RunFacts
) -> list[tuple[str, str]]:
    """A request the guardrail stops is told as the guardrail's notice, not as a failure
    (checked where nothing else could fail a run: no process, storage or model fault)."""
    if thread.dead_channel or facts.interrupting_faults or facts.model_faults:
        return []
    out: list[tuple[str, str]] = []
    for message in messages:
        if SECRET not in message.text or not message.acked or message.tag in facts.given:
            continue
        pattern = re.compile(rf"#{re.escape(message.tag)}\b")
        if any(p.what.kind is PostKind.ANSWER and pattern.search(p.text) for p in thread.posts):
            continue
        later = [told_kind(p) for p in thread.posts if p.at >= message.sent_at]
        if "run_failed" in later and "guardrail" not in later:
            out.append(("guardrail_read_as_failure", f"#{message.tag} told as a failure"))
    return out


def _shared_keys(facts: RunFacts) -> list[tuple[str, str]]:
    calls: dict[str, set[str]] = defaultdict(set)
    for request in facts.keyed:
        if request["call_id"] in facts.calls:
            calls[str(request["key"])].add(str(request["call_id"]))
    return [
        ("keyed_key_shared", f"key {key[:12]}… sent for {sorted(ids)}")
        for key, ids in calls.items()
        if len(ids) > 1
    ]
