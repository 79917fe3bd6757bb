"""What a chaos run leaves behind, gathered once it is quiet (`bench.chaos.run`): the
stand-in's posts and private answers, each thread's stored state, the side-effect ledgers
and the keyed service's requests, what the model was asked and given; and the same facts
written into the run's history."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from bench.chaos.classify import classify_post
from bench.chaos.facts import (
    KEYED_ATTEMPTS,
    BotPost,
    ResumeAtCapFacts,
    RunFacts,
    StopFacts,
    ThreadFacts,
    UninstallFacts,
    thread_of_tag,
)
from bench.chaos.model import PAY_REF, content_text
from storage.models import utcnow

if TYPE_CHECKING:
    from bench.chaos.run import Run


async def gather_facts(run: Run, posts_from: int) -> RunFacts:
    """What is visible once the run is quiet: the posts, the storage, the ledgers, what
    the model was asked and given, and what each stopper was told."""
    # This run's: the same seed runs once per backend, against one model server.
    calls = {
        c: made
        for c, made in run.model.calls.items()
        if made.tag.startswith(f"s{run.plan.seed}t") and made.at >= run.wall_started
    }
    mine = f"call_s{run.plan.seed}t"
    effects = []
    if run.ledger.exists():
        for line in run.ledger.read_text().splitlines():
            entry = json.loads(line)
            if str(entry.get("call_id", "")).startswith(mine):
                effects.append(entry)
    if run.mcp_effects is not None and run.mcp_effects.exists():
        for line in run.mcp_effects.read_text().splitlines():
            entry = json.loads(line)  # `pay`'s recipient names the call
            ref = PAY_REF.search(str(entry.get("to", "")))
            if ref and ref.group(1).startswith(mine):
                effects.append({"tool": entry["tool"], "call_id": ref.group(1), **entry})
    keyed = [dict(r) for r in run.keyed if str(r["call_id"]).startswith(mine)]
    effects += [
        {"tool": "charge", "call_id": r["call_id"], "time": r["at"], "key": r["key"]}
        for r in keyed
        if not r["repeated"]  # the service applied the key (once: it keeps its result)
    ]
    threads = []
    posts = run.slack.posts[posts_from:]
    for thread in run.threads:
        key = thread.key
        if key is None:
            continue
        facts = ThreadFacts(
            index=thread.plan.index,
            key=key,
            dead_channel=key.channel in run.injector.dead_channels,
            discarded=any(step.kind == "discard" for step in thread.plan.steps)
            or thread.plan.discard_after_approval is not None,
            approved_clicks=thread.approved_clicks,
            rejected_clicks=thread.rejected_clicks,
            approve_replies=thread.approve_replies,
            reject_replies=thread.reject_replies,
            clicks=thread.clicks,
            late_clicks=thread.late_clicks,
        )
        facts.posts = [
            BotPost(at=p.at, text=p.shown, what=classify_post(p.args))
            for p in posts
            if p.channel == key.channel
            and (p.thread_ts or p.ts) == key.thread_ts
            and not p.deleted  # what the thread ends with
        ]
        asked = [c for c, made in calls.items() if thread_of_tag(made.tag) == thread.plan.index]
        await asyncio.to_thread(_read_storage, run, facts, asked)
        threads.append(facts)
    return RunFacts(
        threads=threads,
        messages=run.people.sent,
        calls=calls,
        effects=effects,
        now=utcnow(),
        interrupting_faults=any(
            kind.startswith(("process:", "storage:")) for kind in run.plan.fault_kinds
        ),
        # A `(flaky)` request fails at the model too.
        model_faults=any(kind.startswith("model:") for kind in run.plan.fault_kinds)
        or run.plan.resume_at_cap is not None,
        state_ttl=run.plan.state_ttl,
        longest_outage=run.longest_outage,
        given={
            tag: at
            for tag, at in run.model.given.items()
            if tag.startswith(f"s{run.plan.seed}t") and at >= run.wall_started
        },
        stops=[_stop_facts(run, stop, token) for stop, token in run.stoppers.stops],
        stops_given=[
            (user, index, at)
            for user, threads, at in run.model.stops_given
            if at >= run.wall_started
            for prefix in threads
            if (index := thread_of_tag(f"{prefix}m0")) is not None
            and prefix.startswith(f"s{run.plan.seed}t")
        ],
        keyed=keyed,
        keyed_attempts=KEYED_ATTEMPTS,
        redelivered_stops=run.stoppers.redelivered,
        uninstall=await asyncio.to_thread(_uninstall_facts, run),
        home_discards=run.home.found,
        unsigned=run.unsigned.found,
        in_flight=run.unsigned.samples,
        unsigned_given={
            tag: at
            for tag, at in run.model.given.items()
            if tag.startswith(f"s{run.plan.seed}x") and at >= run.wall_started
        },
        leaks=run.slack.leaks[run.leaks_from :],
        sigstop=any(kind.startswith("process:sigstop") for kind in run.plan.fault_kinds),
        max_runs=run.plan.resume_at_cap.max_runs if run.plan.resume_at_cap else None,
        model_requests=run.model.log[run.model_from :],
        resumes_at_cap=[_resume_facts(run, r) for r in run.resumes.found],
    )


def _resume_facts(run: Run, resume: ResumeAtCapFacts) -> ResumeAtCapFacts:
    resume.answers = [p.text for p in run.slack.private if p.token and p.token == resume.token]
    return resume


def _uninstall_facts(run: Run) -> UninstallFacts | None:
    """The second workspace's facts, with what storage says of it once quiet."""
    if run.workspace is None:
        return None
    facts = run.workspace.facts
    for thread in (facts.before, facts.after):
        if thread is None:
            continue
        thread.record = run.store.get(thread.key)
        thread.notices = [
            str(classify_post(p.args).notice)
            for p in run.slack.posts
            if p.channel == thread.key.channel
            and (p.thread_ts or p.ts) == thread.key.thread_ts
            and not p.deleted
            and classify_post(p.args).notice
        ]
    facts.installed = run.store.find_installation(f"-:{facts.team}") is not None
    if facts.event_id:
        facts.removal_recorded = run.store.find_removal(facts.event_id) is not None
        pending = {r.removal_id for r in run.store.pending_removals()}
        facts.removal_finished = facts.removal_recorded and facts.event_id not in pending
    return facts


def _stop_facts(run: Run, stop: StopFacts, token: str | None) -> StopFacts:
    """What the stopper was told privately: through the button's response_url, or
    ephemeral in the thread (the reply), since the stop was sent."""
    thread = run.threads[stop.thread]
    stop.answers = [
        p.text
        for p in run.slack.private
        if (token is not None and p.token == token)
        or (
            token is None
            and p.user == stop.user
            and p.channel == thread.plan.channel
            and p.thread_ts == thread.ts
            and p.at >= stop.sent_at
        )
    ]
    return stop


def _read_storage(run: Run, facts: ThreadFacts, calls: list[str]) -> None:
    facts.record = run.store.get(facts.key)
    if facts.record is None:
        facts.tombstone = run.store.expired_record(facts.key)
    facts.items = [json.loads(text) for text in run.store.read_items(facts.key).items]
    facts.inbox = len(run.store.read_inbox(facts.key))
    for call_id in calls:
        record = run.store.get_tool_call(facts.key, call_id)
        if record is not None:
            facts.tool_records[call_id] = record
    facts.blobs = run.list_blobs(facts.key)


def record_facts(run: Run, facts: RunFacts, attempts_from: int) -> None:
    """The facts, into the run's history (what a replay is compared with)."""
    for thread in facts.threads:
        record = thread.record
        run.note(
            "thread",
            index=thread.index,
            key=str(thread.key),
            status=record.status.value if record else None,
            lease_owner=record.lease_owner if record else None,
            fence=record.fence if record else None,
            tombstone=thread.tombstone.status.value if thread.tombstone else None,
            checkpoint=record.checkpoint.object_key if record and record.checkpoint else None,
            inbox=thread.inbox,
            dead_channel=thread.dead_channel,
            posts=[
                {"kind": p.what.kind.value, "notice": p.what.notice, "text": p.text[:300]}
                for p in thread.posts
            ],
            session=[_short(item) for item in thread.items],
            tool_records={
                c: {
                    "status": r.status.value,
                    "output": (r.output or "")[:120],
                    "fence": r.fence,
                }
                for c, r in thread.tool_records.items()
            },
            blobs=thread.blobs,
        )
    run.note("ledger", effects=facts.effects)
    run.note(
        "shapes",
        redelivered_stops=[r.__dict__ for r in facts.redelivered_stops],
        uninstall=_plain(facts.uninstall),
        home_discards=[h.__dict__ for h in facts.home_discards],
        unsigned=[u.__dict__ for u in facts.unsigned],
        in_flight=[sample.__dict__ for sample in facts.in_flight],
        unsigned_given=facts.unsigned_given,
        leaks=facts.leaks,
        resumes_at_cap=[r.__dict__ for r in facts.resumes_at_cap],
    )
    run.note("model_calls", calls={c: m.__dict__ for c, m in facts.calls.items()})
    run.note("model_requests", requests=run.model.log[run.model_from :])
    channels = set(run.plan.channels)
    run.note(
        "slack_attempts",
        attempts=[
            a
            for a in run.slack.attempts[attempts_from:]
            if a.get("channel") in channels or a.get("fault")
        ],
    )


def _plain(facts: UninstallFacts | None) -> Any:
    if facts is None:
        return None
    found: dict[str, Any] = dict(facts.__dict__)
    for name in ("before", "after"):
        thread = getattr(facts, name)
        found[name] = thread and {
            "key": str(thread.key),
            "acked_at": thread.acked_at,
            "status": thread.record.status.value if thread.record else None,
            "notices": thread.notices,
        }
    return found


def _short(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    kind = item.get("type") or item.get("role")
    if kind == "function_call":
        return {"call": item.get("call_id"), "name": item.get("name")}
    if kind == "function_call_output":
        return {"output": item.get("call_id"), "text": str(item.get("output"))[:100]}
    return {kind or "item": content_text(item.get("content"))[:120]}
