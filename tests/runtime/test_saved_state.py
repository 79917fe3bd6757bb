"""Saved state that can't be trusted fails closed; the ledger keeps tools at most once;
discard, recovery and busy threads."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from agents import Agent, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message

from bot.runtime import (
    Answer,
    ApprovalRequest,
    ConversationRuntime,
    Decided,
    Discarded,
    Notice,
    NoticeKind,
    Refused,
)
from bot.runtime.guard import UNKNOWN_OUTCOME
from bot.runtime.open_calls import NOT_RUN
from storage import CheckpointMeta, Committed, ConversationKey, Status, Store
from storage.models import utcnow
from testkit.runtime import (
    KEY,
    SideEffects,
    asked,
    build_agent,
    decide,
    echo_model,
    email_then_answer,
    history,
    kinds,
    record_of,
)
from testkit.storage_faults import overwrite_blob
from tests.conftest import Backend


async def paused(store: Store, effects: SideEffects) -> tuple[ConversationRuntime, ApprovalRequest]:
    rt = ConversationRuntime(store, build_agent(email_then_answer(), effects))
    request = await asked(rt, event_id="Ev1")
    return rt, request


def tamper_with_checkpoint(
    store: Store, meta: CheckpointMeta, change: Callable[[dict[str, Any]], None] | None = None
) -> Committed:
    """Another process commits the paused run's checkpoint again, with `meta` and with its
    document changed by `change`; the thread stays paused, its card delivered."""
    record = record_of(store)
    assert record.checkpoint is not None
    document = store.load_checkpoint(record.checkpoint)
    if change is not None:
        change(document)
    lease, _ = store.acquire(KEY, "tamper")
    done = store.commit(
        lease,
        state=document,
        meta=meta,
        expected_version=record.checkpoint.version,
        status=Status.AWAITING_APPROVAL,
    )
    store.release(lease, status=Status.AWAITING_APPROVAL, delivered=True)
    return done


def in_the_ledger(store: Store, process: str, output: str | None = None) -> None:
    """`process` recorded the paused call as started (and, given its `output`, completed)
    and gave the thread back, still paused."""
    lease, _ = store.acquire(KEY, process)
    store.begin_tool_call(lease, "call-email", "send_email", "{}")
    if output is not None:
        store.complete_tool_call(lease, "call-email", output)
    store.release(lease, status=Status.AWAITING_APPROVAL)


async def assert_failed_closed(
    store: Store, effects: SideEffects, outcomes: list[Any], kind: NoticeKind
) -> None:
    notices = [o for o in outcomes if isinstance(o, Notice)]
    assert [n.kind for n in notices] == [kind], outcomes
    assert "send_email" in notices[0].text and "Nothing from it was run again" in notices[0].text
    assert effects.calls() == []
    record = store.get(KEY)
    assert record is not None
    assert (record.status, record.lease_owner) == (Status.SET_ASIDE, None)
    # The checkpoint that could not be trusted is replaced by a finished one (it carries
    # the notice until it is delivered): nothing in it can run.
    assert record.checkpoint is not None and record.checkpoint.finished
    # The history stays valid for the model: the unanswered call is closed, not run.
    assert kinds(store) == ["user", "function_call", "function_call_output"]
    assert history(store)[2]["output"] == NOT_RUN
    # The next message starts a fresh run on that history.
    fresh = ConversationRuntime(store, build_agent(echo_model(), effects))
    answer = await fresh.handle_message(KEY, event_id="Ev-next", user="U1", text="start over")
    assert answer == [Answer(key=KEY, text="echo: start over")]
    assert effects.calls() == []


async def test_expired_checkpoint(backend: Backend, effects: SideEffects) -> None:
    """The conversation is alive (a message six days on kept it so) but the run's
    checkpoint is older than the TTL: it fails closed."""
    store = backend.open(state_ttl="7d")
    _, request = await paused(store, effects)
    six_days = backend.open(state_ttl="7d")
    six_days.clock = lambda: utcnow() + timedelta(days=6)
    lease, _ = six_days.acquire(KEY, "someone")
    six_days.release(lease, status=Status.AWAITING_APPROVAL)  # activity, no new checkpoint
    later = backend.open(state_ttl="7d")
    later.clock = lambda: utcnow() + timedelta(days=8)  # the same bot, eight days on
    rt_later = ConversationRuntime(later, build_agent(email_then_answer(), effects))
    outcomes = await decide(rt_later, request, "call-email")
    await assert_failed_closed(later, effects, outcomes, NoticeKind.STATE_EXPIRED)


async def test_unsupported_schema(store: Store, effects: SideEffects) -> None:
    rt, _ = await paused(store, effects)
    meta = CheckpointMeta(schema_version="0.1", agent_fingerprint=rt.parts.fingerprint)
    tamper_with_checkpoint(store, meta)
    outcomes = await rt.scheduler.resume(KEY)
    await assert_failed_closed(store, effects, outcomes, NoticeKind.STATE_INCOMPATIBLE)


async def test_changed_agent_fingerprint(store: Store, effects: SideEffects) -> None:
    _, request = await paused(store, effects)

    @function_tool(needs_approval=True)
    def send_email(to: str, body: str, cc: str) -> str:  # the signature changed
        """Send an email."""
        effects.record("send_email", {"to": to})
        return "sent"

    changed = Agent(name="assistant", model=email_then_answer(), tools=[send_email])
    outcomes = await decide(ConversationRuntime(store, changed), request, "call-email")
    await assert_failed_closed(store, effects, outcomes, NoticeKind.STATE_INCOMPATIBLE)
    assert "agent changed" in outcomes[0].text


async def test_corrupted_checkpoint(store: Store, effects: SideEffects) -> None:
    rt, request = await paused(store, effects)
    record = store.get(KEY)
    assert record is not None and record.checkpoint is not None
    store.delete_checkpoint(record.checkpoint)
    overwrite_blob(store, record.checkpoint.object_key, b"\x1f\x8b garbage")
    outcomes = await decide(rt, request, "call-email")
    await assert_failed_closed(store, effects, outcomes, NoticeKind.STATE_DAMAGED)


async def test_state_the_sdk_refuses(store: Store, effects: SideEffects) -> None:
    rt, request = await paused(store, effects)

    def refused_by_the_sdk(document: dict[str, Any]) -> None:
        document["run_state"]["$schemaVersion"] = "99.0"

    done = tamper_with_checkpoint(store, rt.parts.meta(), refused_by_the_sdk)
    assert done.checkpoint is not None
    request = request.model_copy(update={"checkpoint_version": done.checkpoint.version})
    outcomes = await decide(rt, request, "call-email")
    await assert_failed_closed(store, effects, outcomes, NoticeKind.STATE_INCOMPATIBLE)
    assert "SDK refused" in outcomes[0].text


async def test_a_started_call_that_never_completed_is_not_run_again(
    store: Store, effects: SideEffects
) -> None:
    rt, request = await paused(store, effects)
    # As if a process had started the call, then died before recording its result.
    in_the_ledger(store, "dead-process")
    outcomes = await decide(rt, request, "call-email")
    assert [type(o) for o in outcomes] == [Decided, Notice, Answer]
    assert outcomes[1].kind is NoticeKind.TOOL_OUTCOME_UNKNOWN
    assert effects.calls() == []
    assert history(store)[2]["output"] == UNKNOWN_OUTCOME


async def test_a_completed_call_returns_its_recorded_output(
    store: Store, effects: SideEffects
) -> None:
    rt, request = await paused(store, effects)
    in_the_ledger(store, "earlier-process", output="sent earlier")
    outcomes = await decide(rt, request, "call-email")
    assert [type(o) for o in outcomes] == [Decided, Answer]
    assert effects.calls() == []
    assert history(store)[2]["output"] == "sent earlier"


async def test_discard_by_admin(store: Store, effects: SideEffects) -> None:
    rt, request = await paused(store, effects)
    record = store.get(KEY)
    assert record is not None and record.checkpoint is not None
    outcomes = await rt.discard(KEY, by="UADMIN")
    summary, notice = outcomes
    assert isinstance(summary, Discarded) and isinstance(notice, Notice)
    assert summary.removed_checkpoint == record.checkpoint.object_key
    assert [c.tool_name for c in summary.pending_calls] == ["send_email"]
    assert notice.kind is NoticeKind.DISCARDED and "UADMIN" in notice.text
    after = store.get(KEY)
    assert after is not None
    assert (after.status, after.lease_owner) == (Status.DISCARDED, None)
    assert after.checkpoint is not None and after.checkpoint.finished  # nothing left to run
    assert after.checkpoint.object_key != summary.removed_checkpoint
    assert kinds(store) == ["user", "function_call", "function_call_output"]  # history kept
    assert history(store)[2]["output"] == NOT_RUN  # the ledger never saw it start
    [late] = await decide(rt, request, "call-email")
    assert isinstance(late, Refused) and late.text == "That approval is no longer pending."
    assert effects.calls() == []
    assert await rt.discard(
        ConversationKey(team="T9", channel="C9", thread_ts="1.0"), by="UADMIN"
    ) == [
        Refused(
            key=ConversationKey(team="T9", channel="C9", thread_ts="1.0"),
            text="There is no conversation in that thread.",
        )
    ]


async def test_stale_lists_paused_conversations_idle_too_long(
    store: Store, effects: SideEffects
) -> None:
    rt, _ = await paused(store, effects)
    assert await rt.queries.stale(timedelta(hours=1)) == []
    [record] = await rt.queries.stale(timedelta(0))
    assert record.key == KEY


async def test_recovery_by_two_replicas_serves_each_conversation_once(
    store: Store, backend: Backend, effects: SideEffects
) -> None:
    keys = [ConversationKey(team="T9", channel="CR", thread_ts=f"{i}.0") for i in range(6)]
    for i, key in enumerate(keys):  # kept unheld (a shutdown gave them up, or they queued)
        assert store.enqueue(key, f"Ev{i}", f'{{"user":"U1","text":"question {i}"}}')
    replicas = [
        ConversationRuntime(backend.open(), build_agent(echo_model(), effects), owner=f"r{n}")
        for n in range(2)
    ]
    results = await asyncio.gather(*(r.recover() for r in replicas))
    outcomes = [o for result in results for o in result]
    answers = sorted((o.key.thread_ts, o.text) for o in outcomes if isinstance(o, Answer))
    assert answers == [(f"{i}.0", f"echo: question {i}") for i in range(6)]
    # No run had started in them: they are answered, not announced as resumed.
    assert [o for o in outcomes if isinstance(o, Notice)] == []
    for key in keys:
        assert kinds(store, key) == ["user", "message"]
        assert record_of(store, key).status is Status.IDLE
    assert await replicas[0].recover() == []


async def test_a_message_for_a_busy_thread_is_served_right_after(
    store: Store, backend: Backend, effects: SideEffects
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(call: Any) -> Any:
        started.set()
        await release.wait()
        return [assistant_message("first answer")]

    model = ScriptedModel([ModelStep.respond(slow), [assistant_message("second answer")]])
    first = ConversationRuntime(store, build_agent(model, effects), owner="A")
    second = ConversationRuntime(backend.open(), build_agent(echo_model(), effects), owner="B")
    running = asyncio.create_task(first.handle_message(KEY, event_id="E1", user="U1", text="one"))
    await started.wait()
    queued = await second.handle_message(KEY, event_id="E2", user="U1", text="two")
    assert [n.kind for n in queued if isinstance(n, Notice)] == [NoticeKind.QUEUED]
    release.set()
    outcomes = await running
    assert [o.text for o in outcomes if isinstance(o, Answer)] == ["first answer", "second answer"]
    users = [i["content"] for i in history(store) if i.get("role") == "user"]
    assert users == ["<@U1>: one", "<@U1>: two"]
    assert store.read_inbox(KEY) == []
    assert record_of(store, KEY).status is Status.IDLE


async def test_many_conversations_at_once_in_one_process(
    store: Store, effects: SideEffects
) -> None:
    rt = ConversationRuntime(store, build_agent(echo_model(40), effects))
    keys = [ConversationKey(team="T9", channel="CM", thread_ts=f"{i}.5") for i in range(20)]
    results = await asyncio.gather(
        *(
            rt.handle_message(k, event_id=f"M{i}", user="U", text=f"q{i}")
            for i, k in enumerate(keys)
        )
    )
    assert [r for r in results] == [[Answer(key=k, text=f"echo: q{i}")] for i, k in enumerate(keys)]
