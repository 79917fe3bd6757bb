"""Past its TTL a conversation's state is gone, but its record stays as a tombstone: the
first event in the thread after the expiry (a click, a reply, a Stop, a `/resume`) tells the
thread, once, in a recorded notice; nothing that was waiting runs; a new mention starts
clean, without the old history. After the tombstone's own TTL, the thread is unknown."""

from __future__ import annotations

import asyncio
import os
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.runtime import (
    Answer,
    ApprovalRequest,
    AwaitingDecision,
    ConversationRuntime,
    Notice,
    NoticeKind,
    Refused,
    StatusReply,
)
from bot.runtime.delivery import DeliveryFailed
from bot.runtime.expiry import EXPIRED
from bot.runtime.lease_owner import SEPARATOR, boot_id, provably_dead
from storage import Status, Store, lease
from storage.models import utcnow
from testkit.runtime import (
    KEY,
    SideEffects,
    asked,
    build_agent,
    decide,
    echo_model,
    email_then_answer,
    kinds,
    record_of,
)
from tests.conftest import Backend
from tests.storage.conftest import clocked


class Delivered:
    """The outcomes the thread was sent (the runtime's sink)."""

    def __init__(self) -> None:
        self.outcomes: list[Any] = []

    async def __call__(self, outcome: Any, *_: Any) -> None:
        self.outcomes.append(outcome)

    def notices(self, kind: NoticeKind) -> list[Notice]:
        return [o for o in self.outcomes if isinstance(o, Notice) and o.kind is kind]


async def paused_then_expired(
    backend: Backend, effects: SideEffects, *, days: int = 8
) -> tuple[ConversationRuntime, Store, ApprovalRequest, Delivered]:
    """A run paused for approval (`send_email`), with a reply queued for it; then the same
    bot `days` later, its state expired."""
    store = backend.open(state_ttl="7d", tombstone_ttl="30d")
    rt = ConversationRuntime(store, build_agent(email_then_answer(), effects))
    request = await asked(rt, event_id="Ev1")
    await rt.handle_message(KEY, event_id="Ev2", user="U2", text="and copy Bob please")
    later = backend.open(state_ttl="7d", tombstone_ttl="30d")
    later.clock = lambda: utcnow() + timedelta(days=days)
    delivered = Delivered()
    rt_later = ConversationRuntime(later, build_agent(echo_model(), effects), on_outcome=delivered)
    return rt_later, later, request, delivered


def assert_told(
    delivered: Delivered, store: Store, effects: SideEffects, *, fresh_run: bool = False
) -> Notice:
    [notice] = delivered.notices(NoticeKind.STATE_EXPIRED)
    assert "expired" in notice.text and "`send_email` (waiting for approval) was not run" in (
        notice.text
    )
    assert [call.call_id for call in notice.settles] == ["call-email"] and notice.closes_cards
    assert "“and copy Bob please”" in notice.details  # the reply that was never answered
    assert effects.calls() == []
    record = record_of(store)
    assert (record.status, record.expired_from, record.lease_owner) == (Status.IDLE, None, None)
    assert record.participants >= {"U1", "U2"}
    # None of the expired history is part of it any more (only a fresh run's).
    assert kinds(store) == (["user", "message"] if fresh_run else [])
    return notice


async def test_a_click_after_expiry_tells_the_thread_and_runs_nothing(
    backend: Backend, effects: SideEffects
) -> None:
    rt, store, request, delivered = await paused_then_expired(backend, effects)
    outcomes = await decide(rt, request, "call-email")
    assert Refused(key=KEY, text=EXPIRED, user="U1") in outcomes  # the clicker, privately
    assert_told(delivered, store, effects)
    # Once: a second click is only answered (its call is unknown to the new conversation).
    again = await decide(rt, request, "call-email")
    assert [type(o) for o in again] == [Refused]
    assert len(delivered.notices(NoticeKind.STATE_EXPIRED)) == 1 and effects.calls() == []


async def test_a_reply_after_expiry_is_told_not_run(backend: Backend, effects: SideEffects) -> None:
    rt, store, _, delivered = await paused_then_expired(backend, effects)
    await rt.intake.keep_message(
        KEY, event_id="Ev3", user="U1", text="yes", create=False, take=True
    )
    await rt.serve(KEY)  # a reply in the thread, not a mention
    notice = assert_told(delivered, store, effects)
    assert "“yes”" in notice.details
    assert not [o for o in delivered.outcomes if isinstance(o, Answer)]  # the model got nothing
    # The next message starts a fresh conversation.
    answer = await rt.handle_message(KEY, event_id="Ev4", user="U1", text="hello again")
    assert Answer(key=KEY, text="echo: hello again") in answer
    assert kinds(store) == ["user", "message"]


async def test_an_expiry_counts_every_message_it_does_not_quote(
    backend: Backend, effects: SideEffects
) -> None:
    """A busy thread's expired state quotes the first few of its unanswered messages and
    counts all of them (chaos seed 160014: 37 queued, the notice said 11)."""
    rt, _, _, delivered = await paused_then_expired(backend, effects)
    early = backend.open(state_ttl="7d", tombstone_ttl="30d")  # while the state lasts
    rt_early = ConversationRuntime(early, build_agent(echo_model(), effects))
    for i in range(24):
        await rt_early.intake.keep_message(
            KEY, event_id=f"Ev1{i:02d}", user="U2", text=f"reply {i}"
        )
    await rt.intake.keep_message(
        KEY, event_id="Ev3", user="U1", text="yes", create=False, take=True
    )
    await rt.serve(KEY)
    [notice] = delivered.notices(NoticeKind.STATE_EXPIRED)
    assert "26 messages sent here were not answered" in notice.text  # 1 + 24 + "yes"
    assert notice.details[0] == "“and copy Bob please”"
    assert notice.details[-1] == "… and 16 more" and len(notice.details) == 11
    assert effects.calls() == []


async def test_messages_refused_before_an_expiry_are_told_after_it(
    backend: Backend, effects: SideEffects
) -> None:
    """Messages refused at a full backlog, whose notice never went out (its process died),
    are told when the thread comes back after the expiry, after the expiry notice (chaos
    seed 160014)."""
    store = backend.open(state_ttl="7d", tombstone_ttl="30d", backlog_limit=2)
    rt = ConversationRuntime(store, build_agent(email_then_answer(), effects))
    await rt.handle_message(KEY, event_id="Ev1", user="U1", text="email Ana")
    for event in ("Ev7", "Ev8", "Ev9"):  # past the cap, kept by a process that then died
        store.keep(
            KEY, event, "{}", create=False, participant="U2", refusal_text=f"{event} Carl too"
        )
    assert record_of(store).refusals_untold
    later = backend.open(state_ttl="7d", tombstone_ttl="30d", backlog_limit=2)
    later.clock = lambda: utcnow() + timedelta(days=8)
    delivered = Delivered()
    rt_later = ConversationRuntime(later, build_agent(echo_model(), effects), on_outcome=delivered)
    await rt_later.intake.keep_message(KEY, event_id="Ev3", user="U1", text="yes", create=False)
    await rt_later.serve(KEY)
    told = [o.kind for o in delivered.outcomes if isinstance(o, Notice)]
    assert told == [NoticeKind.STATE_EXPIRED, NoticeKind.NOT_TAKEN]
    [not_taken] = delivered.notices(NoticeKind.NOT_TAKEN)
    assert "Ev9 Carl too" in " ".join(not_taken.details) + not_taken.text
    assert not record_of(later).refusals_untold and effects.calls() == []


async def test_a_mention_after_expiry_is_told_then_served_fresh(
    backend: Backend, effects: SideEffects
) -> None:
    rt, store, _, delivered = await paused_then_expired(backend, effects)
    kept = await rt.intake.keep_message(
        KEY, event_id="Ev3", user="U3", text="start over", create=True, take=True
    )
    outcomes = await rt.serve(KEY)
    assert kept.value == "kept"
    assert_told(delivered, store, effects, fresh_run=True)
    assert Answer(key=KEY, text="echo: start over") in outcomes
    assert kinds(store) == ["user", "message"]
    assert record_of(store).participants == {"U1", "U2", "U3"}


async def test_stop_and_resume_after_expiry_tell_the_thread(
    backend: Backend, effects: SideEffects
) -> None:
    rt, store, _, delivered = await paused_then_expired(backend, effects)
    stranger = await rt.request_stop(KEY, "U9")  # never in the conversation: told nothing
    assert not stranger.accepted and delivered.outcomes == []
    assert await rt.scheduler.resume(KEY, user="U9") == [
        StatusReply(
            key=KEY,
            text="I can't resume that thread: there is nothing of mine to "
            "resume there, or it is not one you took part in.",
        )
    ]
    stopping = await rt.request_stop(KEY, "U1")
    assert not stopping.accepted and "expired" in stopping.text
    assert_told(delivered, store, effects)
    [reply] = await rt.scheduler.resume(KEY, user="U1")  # live again (idle): nothing to resume
    assert isinstance(reply, StatusReply) and "nothing to resume" in reply.text.lower()


async def test_resume_after_expiry(backend: Backend, effects: SideEffects) -> None:
    rt, store, _, delivered = await paused_then_expired(backend, effects)
    [reply] = await rt.scheduler.resume(KEY, user="U2")
    assert isinstance(reply, StatusReply) and "expired" in reply.text
    assert_told(delivered, store, effects)


async def test_past_the_tombstone_the_thread_is_unknown(
    backend: Backend, effects: SideEffects
) -> None:
    rt, store, request, delivered = await paused_then_expired(backend, effects, days=40)
    [refused] = await decide(rt, request, "call-email")
    assert refused == Refused(key=KEY, text=EXPIRED, user="U1")
    assert delivered.outcomes == [] and store.get(KEY) is None and effects.calls() == []
    answer = await rt.handle_message(KEY, event_id="Ev-new", user="U5", text="hello")
    assert answer == [Answer(key=KEY, text="echo: hello")]
    assert record_of(store).participants == {"U5"}


class FailsOnce(Delivered):
    """A sink whose first post fails as Slack's 503 does, then delivers."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    async def __call__(self, outcome: Any, *args: Any) -> None:
        if not self.failed:
            self.failed = True
            raise DeliveryFailed("http_503", permanent=False)
        await super().__call__(outcome, *args)


async def test_a_failed_post_is_retried_before_a_short_lived_state_expires(
    backend: Backend, effects: SideEffects
) -> None:
    """TTL 6 s: the approval card's post fails once; its retry is due well within the TTL,
    and a recovery sweep then delivers it (chaos 150047: the retry was due as the state
    expired, expired records are not listed, and the card and the messages kept for the run
    were never posted)."""
    store = backend.open(state_ttl="6s")
    now = [utcnow()]
    store.clock = lambda: now[0]
    sink = FailsOnce()
    rt = ConversationRuntime(store, build_agent(email_then_answer(), effects), on_outcome=sink)
    [request] = await rt.handle_message(KEY, event_id="Ev1", user="U1", text="email Ana")
    assert isinstance(request, ApprovalRequest) and sink.failed and sink.outcomes == []
    record = record_of(store)
    assert record.status is Status.RUNNING and record.delivery_retry_at is not None
    assert record.delivery_retry_at <= record.expires_at - timedelta(seconds=3)
    now[0] = record.delivery_retry_at + timedelta(seconds=0.7)  # the next sweep after it
    await ConversationRuntime(
        store, build_agent(email_then_answer(), effects), on_outcome=sink
    ).recover()
    assert [type(o) for o in sink.outcomes] == [ApprovalRequest, AwaitingDecision]
    assert record_of(store).status is Status.AWAITING_APPROVAL


async def test_a_run_longer_than_a_short_ttl_keeps_its_state_and_answers_what_came_meanwhile(
    backend: Backend, effects: SideEffects
) -> None:
    """TTL 2 s; a run of three slow model calls (two harmless lookups, no checkpoint between
    them) works for 4.5 s, and a reply comes in meanwhile. The run's renewals keep its state
    alive all along: its commit lands, and the reply is answered after it (chaos seed
    425208, aws: the state expired under a run that did not commit for longer than the TTL;
    its history then read as empty, its next commit failed as a conflict, and the two
    messages kept meanwhile were never answered nor told of)."""
    store = backend.open(state_ttl="2s", lease_seconds=3)  # a renewal every second

    def slowly(step: list[Any]) -> ModelStep:
        async def respond(call: Any) -> Any:
            await asyncio.sleep(1.5)
            return step

        return ModelStep.respond(respond)

    model = ScriptedModel(
        [
            slowly([function_call("lookup", {"topic": "a"}, call_id="call-a")]),
            slowly([function_call("lookup", {"topic": "b"}, call_id="call-b")]),
            slowly([assistant_message("Found both.")]),
            slowly([assistant_message("And the reply is answered.")]),
        ]
    )
    rt = ConversationRuntime(store, build_agent(model, effects))
    first = asyncio.create_task(rt.handle_message(KEY, event_id="Ev1", user="U1", text="look"))
    await asyncio.sleep(0.5)
    [queued] = await rt.handle_message(KEY, event_id="Ev2", user="U1", text="and then?")
    assert isinstance(queued, Notice) and queued.kind is NoticeKind.QUEUED
    await asyncio.sleep(3.5)  # 1.5 s past the TTL since the reply, mid-way in the third call
    assert not first.done() and store.get(KEY) is not None  # an expired state reads as none
    outcomes = await asyncio.wait_for(first, 30)
    answers = [o.text for o in outcomes if isinstance(o, Answer)]
    assert answers == ["Found both.", "And the reply is answered."]
    record = record_of(store)
    assert record.status is Status.IDLE and record.expired_from is None
    assert [o for o in outcomes if isinstance(o, Notice)] == []


class FailingFirst(Delivered):
    """A thread whose posts fail (transiently) the first `times` times."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.left = times
        self.tries = 0

    async def __call__(self, outcome: Any, *_: Any) -> None:
        self.tries += 1
        if self.left:
            self.left -= 1
            raise DeliveryFailed("http_500", permanent=False)
        await super().__call__(outcome)


async def test_an_answer_owed_longer_than_the_ttl_is_still_delivered(
    backend: Backend, tmp_path: Path
) -> None:
    """The answer's post fails three times (its retries come within a third of the TTL
    each, and each keeps the state alive): the fourth, past the TTL from the checkpoint
    that holds the answer, delivers it. It was dropped unsaid before (chaos 470013)."""
    store = backend.open(state_ttl="5s")
    now = [utcnow()]
    store.clock = lambda: now[0]
    sink = FailingFirst(3)
    effects = SideEffects(tmp_path / "effects.jsonl")
    rt = ConversationRuntime(store, build_agent(echo_model(), effects), on_outcome=sink)
    await rt.handle_message(KEY, event_id="Ev1", user="U1", text="hello")
    for _ in range(10):
        if sink.outcomes:
            break
        now[0] += timedelta(seconds=2)
        await rt.recover()
    assert sink.tries == 4
    [answer] = [o for o in sink.outcomes if isinstance(o, Answer)]
    assert answer.text == "echo: hello"
    record = record_of(store)
    assert record.status is Status.IDLE and record.undelivered_from() is None


async def test_a_run_resumed_just_before_its_state_would_expire_keeps_it(
    backend: Backend, effects: SideEffects
) -> None:
    """A run held by a process that died; nobody renewed its state since, and it is a
    second from its expiry when recovery takes it over. Resuming is activity: the resumed
    run's model call takes longer than that second (a hand-moved clock), the keeper renews
    meanwhile, and the answer is committed and told (chaos seed 630083, aws, a 5 s TTL:
    the keeper's first renewal came a third of a lease after the takeover, past the expiry,
    and the answer was lost)."""
    store = backend.open(state_ttl="40s", lease_seconds=60)
    renewal_every = min(60 / 3, lease.STOP_CHECK)
    clock = clocked(store)
    # Its holder: a process of this host that is gone (this pid, started at another time).
    gone = SEPARATOR.join([socket.gethostname(), boot_id(), str(os.getpid()), "0", "x"])
    assert provably_dead(gone)
    kept = store.keep(KEY, "Ev1", '{"user":"U1","text":"hi"}', participant="U1", owner=gone)
    assert kept.lease is not None  # held still (a lease of 60 s): it died mid-run
    clock.tick(timedelta(seconds=39))

    async def slow(call: Any) -> Any:
        clock.tick(timedelta(seconds=2))  # past the second the state had left
        await asyncio.sleep(renewal_every + 0.5)  # the keeper renews (as working) meanwhile
        return [assistant_message("Resumed and answered.")]

    rt = ConversationRuntime(store, build_agent(ScriptedModel([ModelStep.respond(slow)]), effects))
    outcomes = await rt.recover()
    assert [o.text for o in outcomes if isinstance(o, Answer)] == ["Resumed and answered."]
    record = record_of(store)
    assert record.status is Status.IDLE and record.expired_from is None
