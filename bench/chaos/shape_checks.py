"""The checks of issue 49's shapes (`bench.chaos.shapes`; `bench.chaos.invariants` lists the
kinds):

- a stop Slack sent again never stops a later run, nor a second one, and never reaches the
  model as a message (`redelivered_stop_applied`, `redelivered_stop_given`);
- an uninstall acked is applied (recorded, finished, the conversations begun before it
  discarded), and its redelivery after the workspace installed the app again removes
  neither the new installation nor a conversation begun since
  (`uninstall_not_applied`, `redelivered_uninstall_applied`);
- a `pay` whose MCP server answered after the client's read timeout is never sent again
  (nor paid again by a model told to try again), its outcome is told unknown, never failed
  (`timed_out_call_resent`, `timed_out_call_misreported`);
- nothing of an answer an output guardrail withheld reaches Slack, not even streamed in
  part, and a guardrail's notice says what the ledger says (`blocked_text_leaked`,
  `guardrail_contradicts_ledger`);
- a Discard from a Home tab that listed the thread stale never discards it once it changed
  (`changed_thread_discarded`);
- an unsigned slow request gets a 4xx, nothing it sent is kept, and it is never counted as
  a request in flight (`unsigned_request_accepted`, `unsigned_request_kept`,
  `unsigned_request_counted`);
- no replica has more model calls at once than its `BOT_MAX_RUNS`, a `/resume` sent while
  its slots are taken included (`runs_over_cap`).

`exercised` counts what of each shape happened in a run (the soak's table sums them)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from bench.chaos.call_checks import NOT_EFFECTS
from bench.chaos.classify import PostKind
from bench.chaos.facts import (
    EXPLAINING_NOTICES,
    RunFacts,
    SentMessage,
    ThreadFacts,
    Violation,
    thread_of_tag,
    told_kind,
    unknown_named,
)
from bench.chaos.model import CALL_FATE, MARKER, SLOW, STOP_SAID, content_text, output_fate
from bench.chaos.plan import ADMIN
from storage import Status

RUN_ENDING = EXPLAINING_NOTICES | {"stopped", "guardrail", "expiry"}
UNFINISHED = (Status.RUNNING, Status.AWAITING_APPROVAL, Status.INTERRUPTED, Status.SET_ASIDE)
ADMIN_STOPPED = re.compile(rf"Stopped by <@{ADMIN}>")
NOTHING_DONE = ("Nothing was done.", "so I did not act on it")
ALREADY_DONE = re.compile(r"Already done \(it ran once and is not repeated\): (.*?)\.(?:\s|$)")
NAMED_TOOL = re.compile(r"`([^`]+)`")
DISCARDED_TOLD = "Discarded; the thread was told."
SLOW_TOOLS = ("pay", "charge")  # the tools a `(slow)` request calls
QUEUED = "queued"  # how `/resume` says it waits for a slot (or that the thread waits one)


def check_shapes(facts: RunFacts, effects: Counter[str]) -> list[Violation]:
    found: list[Violation] = []
    for thread, where, messages in facts.each_thread():
        found += [
            Violation(kind, where, detail)
            for kind, detail in [
                *_redelivered_stops(thread, messages, facts),
                *_slow_calls(thread, messages, facts, effects),
                *_guardrail_notices(thread, facts, effects),
                *_home_discards(thread, messages, facts),
            ]
        ]
    found += [Violation(kind, "(second workspace)", d) for kind, d in _uninstall(facts)]
    found += [Violation(kind, "(slack)", d) for kind, d in _leaks(facts)]
    found += [Violation(kind, where, d) for kind, where, d in _unsigned(facts)]
    found += [Violation(kind, where, d) for kind, where, d in _over_cap(facts)]
    return found


def exercised(facts: RunFacts) -> dict[str, int]:
    """What of issue 49's shapes happened in the run (not only what its plan drew)."""
    slow = {m.tag for m in facts.messages if SLOW in m.text}
    uninstall = facts.uninstall
    at_once = [int(r["at_once"]) for r in facts.model_requests if "at_once" in r]
    return {
        "stops sent again": sum(len(s.resent) for s in facts.redelivered_stops),
        "uninstalls sent again": len(uninstall.resent) if uninstall and uninstall.acked_at else 0,
        "uninstalls sent again after a reinstall": int(
            bool(uninstall and uninstall.reinstalled_at and len(uninstall.resent) > 1)
        ),
        "calls past their client's timeout": sum(
            1 for made in facts.calls.values() if made.tag in slow and made.tool in SLOW_TOOLS
        ),
        "answers withheld by a guardrail": sum(
            1
            for r in facts.model_requests
            if any(MARKER in str(text) for text in r.get("output") or [])
        ),
        "discards from a stale Home tab": sum(1 for h in facts.home_discards if h.clicked_at),
        "unsigned slow requests": len(facts.unsigned),
        "in-flight readings with unsigned open": len(facts.in_flight),
        "resumes at the run cap": sum(1 for r in facts.resumes_at_cap if r.acked_at),
        "resumes told queued": sum(
            1 for r in facts.resumes_at_cap if any(QUEUED in a.lower() for a in r.answers)
        ),
        "messages told queued at the cap": sum(
            1
            for thread in facts.threads
            for p in thread.posts
            if facts.max_runs is not None and p.what.notice == "queued"
        ),
        "most model calls at once in a capped replica": max(at_once, default=0)
        if facts.max_runs is not None
        else 0,
    }


def _run_began(thread: ThreadFacts, before: float) -> float:
    """When the run that ended at `before` began, at the latest: the thread's last post
    before then that ended a run (an answer, a notice that ends one), else 0."""
    ends = [
        p.at
        for p in thread.posts
        if p.at < before and (p.what.kind is PostKind.ANSWER or told_kind(p) in RUN_ENDING)
    ]
    return max(ends, default=0.0)


# -- redelivered stops ------------------------------------------------------------------


def _redelivered_stops(
    thread: ThreadFacts, messages: list[SentMessage], facts: RunFacts
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for stop in facts.redelivered_stops:
        if stop.thread != thread.index or thread.dead_channel or not stop.resent:
            continue
        what = f"the admin's {stop.via} stop ({stop.moment}, sent again {stop.again})"
        notices = [
            p for p in thread.posts if p.what.notice == "stopped" and ADMIN_STOPPED.search(p.text)
        ]
        if len(notices) > 1:
            out.append(("redelivered_stop_applied", f"{what} stopped {len(notices)} runs"))
        for notice in notices:
            began = _run_began(thread, notice.at)
            tags = {tag for tag, at in facts.given.items() if began < at < notice.at}
            run = [m for m in messages if m.tag in tags]
            if run and stop.acked_at and all(m.sent_at > stop.acked_at for m in run):
                out.append(
                    (
                        "redelivered_stop_applied",
                        f"{what} stopped a run begun after it was acked "
                        f"({', '.join(sorted('#' + m.tag for m in run))})",
                    )
                )
        given = Counter(
            at for user, index, at in facts.stops_given if user == ADMIN and index == thread.index
        )
        if any(count > 1 for count in given.values()):
            out.append(("redelivered_stop_given", f"{what}: given to the model twice at once"))
        kept = sum(
            1
            for item in thread.items
            if isinstance(item, dict)
            and item.get("role") == "user"
            and (said := STOP_SAID.match(content_text(item.get("content")).strip()))
            and said.group(1) == ADMIN
        )
        if kept > 1:
            out.append(("redelivered_stop_given", f"{what}: kept {kept}x in the session"))
        taken = bool(notices) or bool(stop.answered_before)
        if stop.via != "reply" and given:
            out.append(("redelivered_stop_given", f"{what}: reached the model as a message"))
        elif given and taken:
            out.append(
                (
                    "redelivered_stop_given",
                    f"{what}: taken as a stop, then given to the model as a message",
                )
            )
    return out


# -- an uninstall sent again ----------------------------------------------------------------


def _uninstall(facts: RunFacts) -> list[tuple[str, str]]:
    removal = facts.uninstall
    if removal is None or not removal.acked_at:
        return []
    out: list[tuple[str, str]] = []
    what = f"{removal.kind} of {removal.team} ({removal.event_id})"
    if not removal.removal_recorded:
        out.append(("uninstall_not_applied", f"{what} acked, never recorded"))
    elif not removal.removal_finished:
        out.append(("uninstall_not_applied", f"{what} still pending once quiet"))
    before = removal.before
    if (
        before is not None
        and before.acked_at
        and before.acked_at < removal.acked_at
        and before.record is not None
        and before.record.status in UNFINISHED
    ):
        out.append(
            (
                "uninstall_not_applied",
                f"{what}: a conversation begun before it is still {before.record.status.value}",
            )
        )
    if removal.reinstalled_at and removal.reinstall_began > removal.acked_at:
        if not removal.installed:
            out.append(("redelivered_uninstall_applied", f"{what} removed the new installation"))
        after = removal.after
        if after is not None and after.acked_at:
            status = after.record.status if after.record is not None else None
            if status is Status.DISCARDED or "discarded" in after.notices:
                out.append(
                    (
                        "redelivered_uninstall_applied",
                        f"{what} discarded a conversation begun after the reinstall",
                    )
                )
    return out


# -- tools that answered after their client gave up ---------------------------------------


def _slow_calls(
    thread: ThreadFacts, messages: list[SentMessage], facts: RunFacts, effects: Counter[str]
) -> list[tuple[str, str]]:
    """A slow `pay` (the MCP server answers after the client's read timeout) that ran is
    paid once, and told unknown: the model is never told it failed (nor to try again), and
    a finished run's thread says so (an answer naming its fate, or a notice). A replica
    SIGSTOPped past the timeout may read the late answer first: `ran` is the truth then."""
    slow = {m.tag for m in messages if SLOW in m.text}
    if not slow or thread.dead_channel or any(told_kind(p) == "expiry" for p in thread.posts):
        return []
    out: list[tuple[str, str]] = []
    pays = {
        c: made
        for c, made in facts.calls.items()
        if made.tool == "pay" and made.tag in slow and thread_of_tag(made.tag) == thread.index
    }
    paid: dict[str, list[str]] = defaultdict(list)
    for call_id, made in pays.items():
        if effects.get(call_id):
            paid[made.tag].append(call_id)
    out += [
        ("timed_out_call_resent", f"#{tag} paid {len(calls)}x: {sorted(calls)}")
        for tag, calls in paid.items()
        if len(calls) > 1
    ]
    outputs = {
        str(i.get("call_id")): content_text(i.get("output"))
        for i in thread.items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    }
    answered: dict[str, str] = {}
    for post in thread.posts:
        if post.what.kind is PostKind.ANSWER:
            answered.update(CALL_FATE.findall(post.text))
    said_unknown = unknown_named(thread.posts)
    finished = thread.record is not None and thread.record.status in (
        Status.IDLE,
        Status.DISCARDED,
    )
    allowed = {"unknown", "ran"} if facts.sigstop else {"unknown"}
    for call_id in (c for calls in paid.values() for c in calls):
        wrong = []
        told = output_fate(outputs[call_id]) if call_id in outputs else None
        if told is not None and told not in allowed:
            wrong.append(f"the model was told {told}: {outputs[call_id][:80]!r}")
        fate = answered.get(call_id)
        if fate is not None and fate not in allowed:
            wrong.append(f"the thread says {fate}")
        if finished and call_id not in said_unknown and fate not in allowed:
            wrong.append("its run is over and nothing says its outcome is unknown")
        if wrong:
            out.append(("timed_out_call_misreported", f"{call_id}: {'; '.join(wrong)}"))
    return out


# -- guardrails -----------------------------------------------------------------------------


def _leaks(facts: RunFacts) -> list[tuple[str, str]]:
    return [
        (
            "blocked_text_leaked",
            f"{leak.get('method')} in {leak.get('channel')}: {str(leak.get('text'))!r}",
        )
        for leak in facts.leaks
    ]


def _guardrail_notices(
    thread: ThreadFacts, facts: RunFacts, effects: Counter[str]
) -> list[tuple[str, str]]:
    """A guardrail's notice says what the ledger says of the calls of the request it
    stopped (those the model asked for since the run before it ended): nothing done only
    when none of them took effect; each tool it says ran did."""
    out: list[tuple[str, str]] = []
    times = {
        str(line["call_id"]): float(line.get("time") or 0.0)
        for line in facts.effects
        if effects.get(str(line["call_id"]))
    }
    mine = {
        c: made
        for c, made in facts.calls.items()
        if thread_of_tag(made.tag) == thread.index and made.tool not in NOT_EFFECTS
    }
    for notice in (p for p in thread.posts if p.what.notice == "guardrail"):
        began = _run_began(thread, notice.at)
        ran = [
            c
            for c, made in mine.items()
            if began < made.at < notice.at and c in times and times[c] < notice.at
        ]
        if any(words in notice.text for words in NOTHING_DONE) and ran:
            out.append(
                (
                    "guardrail_contradicts_ledger",
                    f"says nothing was done; {', '.join(sorted(ran))} ran: {notice.text[:100]!r}",
                )
            )
        done = ALREADY_DONE.search(notice.text)
        for tool in NAMED_TOOL.findall(done.group(1)) if done else []:
            if not any(
                made.tool == tool and c in times and made.at < notice.at for c, made in mine.items()
            ):
                out.append(
                    (
                        "guardrail_contradicts_ledger",
                        f"says `{tool}` ran; no call of it did: {notice.text[:100]!r}",
                    )
                )
    return out


# -- a Discard from a stale Home tab --------------------------------------------------------


def _home_discards(
    thread: ThreadFacts, messages: list[SentMessage], facts: RunFacts
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for discard in facts.home_discards:
        if discard.thread != thread.index or not discard.clicked_at or thread.discarded:
            continue
        changes = [m.acked_at for m in messages if m.acked and m.acked_at > discard.listed_at]
        changes += [
            p.at
            for p in thread.posts
            if p.what.kind is PostKind.DECISION and p.at > discard.listed_at
        ]
        if not changes:
            continue
        what = f"Discard from a tab listed {discard.listed_from}"
        for post in thread.posts:
            discarded = post.what.notice == "discarded" and post.at > discard.clicked_at
            if discarded and any(at < post.at for at in changes):
                out.append(
                    (
                        "changed_thread_discarded",
                        f"{what}: discarded {post.at - min(changes):.1f}s after it changed",
                    )
                )
        if DISCARDED_TOLD in discard.answer:
            out.append(("changed_thread_discarded", f"{what}: the tab says it was discarded"))
    return out


# -- unsigned slow requests ---------------------------------------------------------------


def _unsigned(facts: RunFacts) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for request in facts.unsigned:
        what = f"unsigned #{request.tag} ({request.ends})"
        if request.status is not None and not 400 <= request.status < 500:
            out.append(("unsigned_request_accepted", request.url, f"{what}: {request.status}"))
        if request.tag in facts.unsigned_given:
            out.append(("unsigned_request_kept", request.url, f"{what}: given to the model"))
        pattern = re.compile(rf"#{re.escape(request.tag)}\b")
        for thread in facts.threads:
            if any(pattern.search(p.text) for p in thread.posts):
                out.append(("unsigned_request_kept", str(thread.key), f"{what}: quoted"))
    for sample in facts.in_flight:
        if sample.value > 0:
            out.append(
                (
                    "unsigned_request_counted",
                    sample.url,
                    f"{sample.value:g} in flight with {sample.unsigned_open} unsigned open "
                    "and no signed request on its way",
                )
            )
    return out


# -- the run cap ------------------------------------------------------------------------


def _over_cap(facts: RunFacts) -> list[tuple[str, str, str]]:
    """A replica's process had more model requests open at once than its `BOT_MAX_RUNS`
    (one run makes one model call at a time)."""
    if facts.max_runs is None:
        return []
    return [
        (
            "runs_over_cap",
            f"process {request['process']}",
            f"{request['at_once']} model calls at once with BOT_MAX_RUNS {facts.max_runs} "
            f"(this one: {request.get('input', [])[-1:]})",
        )
        for request in facts.model_requests
        if int(request.get("at_once", 0)) > facts.max_runs
    ]
