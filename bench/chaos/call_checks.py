"""The call checks (`bench.chaos.invariants`): each call the model asked for against the
side-effect ledger (ran at most once, only when approved, as its history, its tool record,
the answers and the notices say), and a keyed call against the keyed service (applied once
when its run finished, one key per call)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from bench.chaos.classify import PostKind
from bench.chaos.facts import (
    CLOSING_NOTICES,
    NAMED_CALL,
    UNKNOWN_CALLS,
    RunFacts,
    ThreadFacts,
    thread_of_tag,
    told_kind,
    unknown_named,
)
from bench.chaos.model import CALL_FATE, HANDOFF, CallMade, content_text, output_fate
from storage import Status, ToolCallStatus

NOT_EFFECTS = frozenset({"lookup", "ask_clerk", HANDOFF})  # (the agent tool's own calls are)
APPROVED_TOOLS = frozenset({"transfer", "wire", "file_claim", "pay"})  # a person approves
KEYED_TOOLS = frozenset({"charge"})
LATE = re.compile(r"\(call (call_[a-z0-9]+_\d+)\) finished after .*? Its result:\s*(.*)", re.S)


def check_calls(
    thread: ThreadFacts,
    calls: dict[str, CallMade],
    effects: Counter[str],
    interrupting_faults: bool,
    slow: frozenset[str] | set[str] = frozenset(),
) -> list[tuple[str, str]]:
    """Each call the model asked for in the thread against the side-effect ledger: it ran
    at most once, a person's call only when approved, and the history, the tool ledger and
    the answers tell what it did. A call of a request in `slow` (tags: its tool answers
    after its client gave up) may end unknown with no fault to cause it."""
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
        or (p.what.notice in TELLING_UNKNOWN and "outcome unknown" in p.text)
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
            caused = interrupting_faults or thread.discarded or made.tag in slow
            if fate == "unknown" and not caused:
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
        if record is not None and record.status is ToolCallStatus.APPROVED and finished:
            out.append(
                (
                    "approved_never_settled",
                    f"{call_id} left approved in the ledger, its run over: neither run nor "
                    "cancelled",
                )
            )
    out += _notices_against_ledger(thread, mine, effects)
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


# Notices that name a request's calls of unknown outcome as the ledger says: those that
# close a run's calls, and those of a request a check or its size ended (`closed.describe`).
TELLING_UNKNOWN = CLOSING_NOTICES | {"guardrail", "too_large"}


def completed_calls(text: str) -> set[str]:
    """The calls a notice says completed: each call's own words (from its name to the next
    call's), as one notice can tell of several calls, some completed and some not run again."""
    found = list(NAMED_CALL.finditer(text))
    ends = [m.start() for m in found[1:]] + [len(text)]
    return {
        m.group(1)
        for m, end in zip(found, ends, strict=True)
        if "completed." in text[m.end() : end]
    }


def _notices_against_ledger(
    thread: ThreadFacts, mine: dict[str, CallMade], effects: Counter[str]
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
            for call_id in completed_calls(post.text):
                if call_id in mine and not effects.get(call_id):
                    out.append(("notice_contradicts_ledger", f"{call_id} completed; it never ran"))
    if expired or thread.record is None:
        return out  # a state that expired took its tool ledger with it
    # Notices said before the record was made spoke of an earlier one's ledger: a discarded
    # state expires untold, taking its rows with it, and a later message makes a new record
    # (aws seed 620282, an expiry run).
    born = thread.record.created_at.timestamp()
    said_unknown = unknown_named([p for p in thread.posts if p.at >= born])
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


def check_keyed(
    thread: ThreadFacts, facts: RunFacts, effects: Counter[str]
) -> list[tuple[str, str]]:
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
        if p.what.notice == "tool_completed_after_restart"
        for call in completed_calls(p.text)
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


def check_shared_keys(facts: RunFacts) -> list[tuple[str, str]]:
    """One idempotency key is sent for one call."""
    calls: dict[str, set[str]] = defaultdict(set)
    for request in facts.keyed:
        if request["call_id"] in facts.calls:
            calls[str(request["key"])].add(str(request["call_id"]))
    return [
        ("keyed_key_shared", f"key {key[:12]}… sent for {sorted(ids)}")
        for key, ids in calls.items()
        if len(ids) > 1
    ]
