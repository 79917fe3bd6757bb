"""The stop checks (`bench.chaos.invariants`): every acked stop is applied or answered,
nothing of a stopped run comes after its notice, and a refused stop stops nothing."""

from __future__ import annotations

import re

from bench.chaos.classify import PostKind
from bench.chaos.facts import (
    NAMED_CALL,
    BotPost,
    RunFacts,
    SentMessage,
    StopFacts,
    ThreadFacts,
    expired_unserved,
    stopped_from,
    thread_of_tag,
    told_kind,
    unknown_named,
)
from bench.chaos.model import TAG
from bot.runtime import NOT_YOURS_TO_STOP

STOP_ACCEPTED = "Stopping it now."

STOP_ANSWERS = (  # a stop that stopped nothing, answered privately
    "It had already finished before your stop arrived",
    "It was already stopped by",
    "Nothing is running there",  # right now; or: its saved state expired
    "There is nothing of yours running there",
    "discarded this conversation's saved state before your stop",  # the discard came first
)

STOPPED_BY = re.compile(r"Stopped by <@([A-Z0-9]+)>")

# An answer, an approval request or a decision: what a run posts.
RUN_POSTS = frozenset({PostKind.ANSWER, PostKind.APPROVAL_REQUEST, PostKind.DECISION})


def check_stops(
    thread: ThreadFacts, stops: list[StopFacts], messages: list[SentMessage], facts: RunFacts
) -> list[tuple[str, str]]:
    """Every acked stop is applied (a stopped notice after it, and nothing of the stopped
    run after that notice) or answered; a refused stop stops nothing and never reaches the
    model; nobody who may not stop a run ever stops it."""
    if thread.dead_channel:
        return []  # neither its notices nor its ephemerals can be posted there
    out: list[tuple[str, str]] = []
    posts = thread.posts
    notices = [p for p in posts if p.what.notice == "stopped"]
    acked = [s for s in stops if s.acked]
    refused = {s.user for s in acked if any(NOT_YOURS_TO_STOP in a for a in s.answers)}
    refused -= {s.user for s in acked if not any(NOT_YOURS_TO_STOP in a for a in s.answers)}
    for notice in notices:
        who = STOPPED_BY.search(notice.text)
        if who and who.group(1) in refused | facts.strangers:
            out.append(("refused_stop_honoured", f"stopped by <@{who.group(1)}>"))
    for stop in acked:
        given = [
            at
            for user, index, at in facts.stops_given
            if user == stop.user and index == thread.index and at >= stop.sent_at
        ]
        what = f"{stop.via} stop by {stop.user} ({stop.moment})"
        if any(NOT_YOURS_TO_STOP in answer for answer in stop.answers):
            if given:
                out.append(("refused_stop_honoured", f"{what}: refused, then given to the model"))
            continue
        applied = any(n.at >= stop.sent_at for n in notices) or _discarded_first(posts, stop)
        answered = any(a in answer for answer in stop.answers for a in STOP_ANSWERS)
        told = stop.via == "reply" and any(
            told_kind(p) == "expiry" and p.at >= stop.sent_at for p in posts
        )
        told = told or expired_unserved(facts, thread)  # as an unanswered message is
        # A reply `stop` the run had finished before is a message to the thread: a discard
        # after it explains it as it does any message (chaos aws 6: taken as a message by a
        # replica whose lease the discard took before it asked the model).
        told = told or (
            stop.via == "reply"
            and not stop.answers
            and any(p.what.notice == "discarded" and p.at >= stop.sent_at for p in posts)
        )
        # Slack's own stop needs no answer: while nothing runs, the session just ends.
        told = told or stop.via == "session"
        if not (applied or answered or given or told):
            heard = ", ".join(repr(a[:40]) for a in stop.answers) or "nothing"
            out.append(("stop_unanswered", f"{what}: no stopped notice after it; answers: {heard}"))
    out += after_stopped(thread, messages, facts)
    return out


def _discarded_first(posts: list[BotPost], stop: StopFacts) -> bool:
    """An admin's discard ended the run the stop was for before the stop was applied (chaos
    180001): a discarded notice after the stop, and no answer, approval request or decision
    of the run between them."""
    after = sorted((p for p in posts if p.at >= stop.sent_at), key=lambda p: p.at)
    for post in after:
        if post.what.notice == "discarded":
            return True
        if post.what.kind in RUN_POSTS:
            return False
    return False


def after_stopped(
    thread: ThreadFacts, messages: list[SentMessage], facts: RunFacts
) -> list[tuple[str, str]]:
    """Nothing of a stopped run after its notice: no answer, approval request or decision
    before the next input that could start another run (a message acked after the stop was
    sent), no effect of a call it had asked for (unless said unknown, or told as a late
    result)."""
    out: list[tuple[str, str]] = []
    late = {
        call
        for p in thread.posts
        if p.what.notice == "tool_finished_late"
        for call in NAMED_CALL.findall(p.text)
    }
    said_unknown = unknown_named(thread.posts)
    times = {
        str(line["call_id"]): float(line["time"]) for line in facts.effects if line.get("time")
    }
    for at, stop_at in stopped_from(facts, thread).items():
        starts = [m.acked_at for m in messages if m.acked and m.acked_at > stop_at]
        starts += [  # a `stop` that was a message, nothing running when it came
            given
            for _, index, given in facts.stops_given
            if index == thread.index and given > stop_at
        ]
        until = min(starts, default=float("inf"))
        # Messages held for the stopped run are served after it, by a run of their own:
        # what that run posts asks about calls made after the notice, or quotes a tag the
        # model got after it.
        made_before = {
            c
            for c, made in facts.calls.items()
            if thread_of_tag(made.tag) == thread.index and made.at < at
        }
        next_request = min(
            (
                p.at
                for p in thread.posts
                if p.at > at
                and p.what.kind is PostKind.APPROVAL_REQUEST
                and not set(p.what.call_ids) <= made_before
            ),
            default=float("inf"),
        )
        for post in thread.posts:
            if not at < post.at < until:
                continue
            if post.what.kind is PostKind.ANSWER:
                tags = TAG.findall(post.text)
                went_on = bool(tags) and all(facts.given.get(t, at) < at for t in tags)
            elif post.what.kind is PostKind.APPROVAL_REQUEST:
                went_on = bool(post.what.call_ids) and set(post.what.call_ids) <= made_before
            else:
                went_on = post.what.kind is PostKind.DECISION and post.at < next_request
            if went_on:
                out.append(
                    (
                        "stopped_run_went_on",
                        f"{post.what.kind.value} {post.at - at:.1f}s after the stopped "
                        f"notice: {post.text[:80]!r}",
                    )
                )
        for call_id, made in facts.calls.items():
            ran_at = times.get(call_id)
            if (
                thread_of_tag(made.tag) == thread.index
                and ran_at is not None
                and made.at < min(at, until)
                and ran_at > at
                and call_id not in said_unknown | late
            ):
                out.append(
                    (
                        "stopped_run_went_on",
                        f"{made.tool} {call_id} took effect {ran_at - at:.1f}s after the "
                        "stopped notice",
                    )
                )
    return out
