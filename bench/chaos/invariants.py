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
  approved_never_settled     a call approved but never started is still `approved` once its
                             thread's run is over (it should have run, or been cancelled)
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

Issue 49's shapes (`bench.chaos.shapes`, checked in `bench.chaos.shape_checks`):

  redelivered_stop_applied   a stop Slack sent again stopped a run begun after the stop was
                             acked, or its thread has two stopped notices of that one stop
  redelivered_stop_given     that stop reached the model as a message after it was taken as a
                             stop (a stopped notice, or a private answer), or twice at once
  uninstall_not_applied      an uninstall acked was not recorded, or is still pending once
                             quiet, or left a conversation begun before it unfinished
  redelivered_uninstall_applied  the uninstall sent again after the workspace installed the
                             app again removed the new installation, or discarded a
                             conversation begun after the reinstall
  timed_out_call_resent      a `pay` past the MCP client's read timeout was paid twice (sent
                             again, or paid again by a model told to try again)
  timed_out_call_misreported such a call was told failed (to the model, or in the thread), or
                             its run finished without anything saying its outcome is unknown
  blocked_text_leaked        a Web API request carried text of an answer an output guardrail
                             withheld (a post, an edit, a streamed chunk)
  guardrail_contradicts_ledger a guardrail's notice says nothing was done while a call of the
                             request took effect, or names a tool as done that never ran
  changed_thread_discarded   a Discard from a Home tab that listed the thread stale discarded
                             it after it changed (a message, a decision)
  unsigned_request_accepted  an unsigned slow request got an answer other than a 4xx
  unsigned_request_kept      what it sent reached the model or a post
  unsigned_request_counted   a replica counted a request in flight while unsigned requests
                             were open to it and no signed one was on its way
  runs_over_cap              a replica had more model calls at once than its BOT_MAX_RUNS
                             (runs with `/resume` at the run cap: a cap of 1 or 2)

Side effects are those of `bench.chaos.agent`: the ledger file's lines, the MCP server's
`pay` lines, and the keys the keyed service applied (each an effect of the call it names)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from bench.chaos.agent import SECRET
from bench.chaos.call_checks import check_calls, check_keyed, check_shared_keys
from bench.chaos.classify import PostKind
from bench.chaos.facts import (
    EXPLAINING_NOTICES,
    RunFacts,
    SentMessage,
    ThreadFacts,
    Violation,
    expired_unserved,
    stopped_from,
    told_kind,
)
from bench.chaos.model import ANSWER, SLOW, TAG, content_text
from bench.chaos.notice_checks import NAMING_NOTICES, check_told, uncounted
from bench.chaos.shape_checks import check_shapes
from bench.chaos.stop_checks import check_stops
from storage import Status
from storage.models import utcnow

# Notices that explain every message before them; the expiry and not-taken notices explain
# only the messages they name or count.
# (A `state_expired` notice is either the expiry's, or a checkpoint older than the TTL that
# fails closed, as before: that one explains everything before it.)
# (A guardrail's notice explains the messages its tripped turn took: all those before it
# that no answer quotes.)
MESSAGE_EXPLAINING = EXPLAINING_NOTICES | {"guardrail"}
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
    "approved_never_settled",
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
    "redelivered_stop_applied",
    "redelivered_stop_given",
    "uninstall_not_applied",
    "redelivered_uninstall_applied",
    "timed_out_call_resent",
    "timed_out_call_misreported",
    "blocked_text_leaked",
    "guardrail_contradicts_ledger",
    "changed_thread_discarded",
    "unsigned_request_accepted",
    "unsigned_request_kept",
    "unsigned_request_counted",
    "runs_over_cap",
)


def check(facts: RunFacts) -> list[Violation]:
    effects = Counter(str(line["call_id"]) for line in facts.effects)
    found: list[Violation] = []
    for thread, where, messages in facts.each_thread():
        slow = {m.tag for m in messages if SLOW in m.text}  # past their client's timeout
        stops = [s for s in facts.stops if s.thread == thread.index]
        of_thread = _thread(thread, messages, facts.given, stopped_from(facts, thread))
        found += [
            Violation(kind, where, detail)
            for kind, detail in [
                *(
                    (kind, detail)
                    for kind, detail in of_thread
                    if kind != "message_unanswered" or not expired_unserved(facts, thread)
                ),
                *check_told(thread, messages, facts, effects),
                *check_calls(thread, facts.calls, effects, facts.interrupting_faults, slow),
                *check_stops(thread, stops, messages, facts),
                *check_keyed(thread, facts, effects),
                *_guardrail(thread, messages, facts),
            ]
        ]
    found += [Violation(kind, "(keyed service)", d) for kind, d in check_shared_keys(facts)]
    found += check_shapes(facts, effects)
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
            for m in uncounted(unexplained, notices)
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
