"""The backlog and expiry notices' checks (`bench.chaos.invariants`): the messages a notice
counts without naming them; a message named as not taken never reached the model; an action
after a sure expiry got the thread told, once per expiry, and nothing asked before it ran
after."""

from __future__ import annotations

import itertools
import re
from collections import Counter

from bench.chaos.facts import (
    ACTIVITY_SLACK,
    BotPost,
    RunFacts,
    SentMessage,
    ThreadFacts,
    thread_of_tag,
    told_kind,
)
from bench.chaos.model import TAG

# Notices that name the messages they are about (dropped by an expiry, not taken; a stop drops
# the messages held for its run: its notice names them, and counts them all).
NAMING_NOTICES = frozenset({"expiry", "not_taken", "stopped"})
NAMED_COUNT = (  # how many messages a naming notice says it is about
    re.compile(r"I couldn't take (\d+) messages?"),
    re.compile(r"(\d+) messages? sent here (?:were|was) not answered"),
    re.compile(r"(\d+) messages? sent for this run (?:were|was) not answered"),
)


def uncounted(messages: list[SentMessage], notices: list[BotPost]) -> list[SentMessage]:
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


def check_told(
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
