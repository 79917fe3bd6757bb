"""Stop means stop, wherever it lands and whenever (issue 30), on both backends, with two
runtimes on one store standing for two replicas. Each race's window is hit on purpose: the
sink (the Slack layer) makes the second request while the first one's outcome is being
delivered, i.e. while the serve still holds the thread."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.runtime import (
    Answer,
    ApprovalRequest,
    ConversationRuntime,
    Decided,
    Discarded,
    Kept,
    Notice,
    NoticeKind,
    Outcome,
    Refused,
)
from bot.runtime.progress import Progress, Quiet, Step
from storage import ConversationKey, Status, ToolCallStatus
from testkit.runtime import (
    KEY,
    SideEffects,
    asked,
    build_agent,
    decide,
    echo_model,
    email_then_answer,
)
from testkit.storage_faults import failing_writes, healed_as_a_serve_gives_up
from tests.conftest import Backend


class Sink:
    """Records what the thread is sent; `when(kind, act)` runs `act` while the first
    outcome of that kind is being delivered."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.hooks: dict[type, Callable[[], Awaitable[Any]]] = {}

    def when(self, kind: type, act: Callable[[], Awaitable[Any]]) -> None:
        self.hooks[kind] = act

    async def __call__(self, outcome: Any, *_: Any) -> None:
        self.sent.append(outcome)
        act = self.hooks.pop(type(outcome), None)
        if act is not None:
            await act()

    def notices(self, kind: NoticeKind) -> list[Notice]:
        return [o for o in self.sent if isinstance(o, Notice) and o.kind is kind]


def replicas(
    backend: Backend, agent: Agent[Any], progress: Progress | None = None, **store: Any
) -> tuple[ConversationRuntime, ConversationRuntime, Sink]:
    """Replicas A (showing its progress on `progress`) and B, telling the same sink; their
    stores opened with the settings in `store`."""
    sink = Sink()
    a = ConversationRuntime(
        backend.open(**store), agent, on_outcome=sink, progress=progress, owner="A"
    )
    b = ConversationRuntime(backend.open(**store), agent, on_outcome=sink, owner="B")
    return a, b, sink


def accepted_stop(rt: ConversationRuntime) -> Callable[[], Awaitable[None]]:
    """A hook that asks `rt` to stop the run (as U1, its starter) and checks the stop was
    accepted."""

    async def stop() -> None:
        assert (await rt.request_stop(KEY, "U1")).accepted

    return stop


async def test_a_stop_as_the_card_is_posted_rejects_the_pending_call(
    backend: Backend, effects: SideEffects
) -> None:
    a, b, sink = replicas(backend, build_agent(email_then_answer(), effects))
    replies: list[Any] = []

    async def stop_now() -> None:  # on the other replica, while A still holds the thread
        replies.append(await b.request_stop(KEY, "U1"))

    sink.when(ApprovalRequest, stop_now)
    [request, *_] = await a.handle_message(KEY, event_id="E1", user="U1", text="email Ana")
    assert isinstance(request, ApprovalRequest) and replies[0].accepted
    [notice] = sink.notices(NoticeKind.STOPPED)
    assert "Not run: `send_email`" in notice.text and [c.call_id for c in notice.settles] == [
        "call-email"
    ]
    late = await decide(a, request, "call-email")
    assert [o.text for o in late if isinstance(o, Refused)] == [
        "That call was stopped by <@U1> before it ran."
    ]
    assert effects.calls() == []
    record = backend.open().get(KEY)
    assert record is not None and (record.status, record.stop_by) == (Status.IDLE, None)


async def test_a_stop_on_another_replica_stops_the_run_at_its_next_step(
    backend: Backend, effects: SideEffects, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Learned from the holder's look for stops (every `STOP_POLL`), not from a renewal nor
    the model's answer: both are made to come far later than the run is given to stop
    (not a timing to meet: a loaded machine has tens of seconds to spare)."""
    monkeypatch.setattr("storage.lease.STOP_CHECK", 60.0)  # the first renewal: lease / 3 = 20 s
    started = asyncio.Event()

    async def slow(call: Any) -> Any:
        started.set()
        await asyncio.sleep(60)
        return [assistant_message("(never: stopped first)")]

    model = ScriptedModel([ModelStep.respond(slow), [assistant_message("fresh")]])
    a, b, sink = replicas(backend, build_agent(model, effects), lease_seconds=60)
    assert a.store.lease_duration == timedelta(seconds=60)
    running = asyncio.create_task(a.handle_message(KEY, event_id="E1", user="U1", text="go"))
    await started.wait()
    assert (await b.request_stop(KEY, "U1")).accepted
    outcomes = await asyncio.wait_for(running, 15)  # before the renewal, or the model
    assert [o.kind for o in outcomes if isinstance(o, Notice)] == [NoticeKind.STOPPED]
    assert not [o for o in sink.sent if isinstance(o, Answer)]


async def test_a_stop_that_arrives_as_the_run_finishes_is_told_so(
    backend: Backend, effects: SideEffects
) -> None:
    a, b, sink = replicas(backend, build_agent(echo_model(), effects))
    replies: list[Any] = []

    async def stop_now() -> None:
        replies.append(await b.request_stop(KEY, "U1"))

    sink.when(Answer, stop_now)
    outcomes = await a.handle_message(KEY, event_id="E1", user="U1", text="hi")
    assert Answer(key=KEY, text="echo: hi") in outcomes and replies[0].accepted
    told = [o for o in sink.sent if isinstance(o, Refused)]
    assert [r.text for r in told] == [
        "It had already finished before your stop arrived; nothing was stopped."
    ]
    assert sink.notices(NoticeKind.STOPPED) == []
    record = backend.open().get(KEY)
    assert record is not None and record.stop_by is None and backend.open().read_inbox(KEY) == []


async def test_a_stop_kept_as_the_run_finishes_then_discarded_is_told_so(
    backend: Backend, effects: SideEffects
) -> None:
    """The run posts its answer; a stop is kept for its holder; an admin discards on the
    other replica before the holder serves the stop. The discard consumed the stop and
    nobody told its asker anything (chaos seed 425288, aws): the stopper is told privately
    that the discard came first, and the thread starts over on the next message."""
    a, b, sink = replicas(backend, build_agent(echo_model(), effects))

    async def stop_then_discard() -> None:
        assert (
            await b.stops.keep_stop(KEY, "U1", event_id="S1")
        ).accepted  # kept for A, its holder
        assert backend.open().read_inbox(KEY)
        await b.discard(KEY, by="UADMIN")

    sink.when(Answer, stop_then_discard)
    await a.handle_message(KEY, event_id="E1", user="U1", text="hi")
    [told] = [o for o in sink.sent if isinstance(o, Refused)]
    assert (told.user, told.text) == (
        "U1",
        "An admin (<@UADMIN>) discarded this conversation's saved state before your stop "
        "was applied; nothing runs there now.",
    )
    [discarded] = sink.notices(NoticeKind.DISCARDED)
    assert "dropped" not in discarded.text  # a stop is not a message waiting for an answer
    assert sink.notices(NoticeKind.STOPPED) == []
    store = backend.open()
    record = store.get(KEY)
    assert record is not None and record.stop_by is None and store.read_inbox(KEY) == []
    outcomes = await a.handle_message(KEY, event_id="E2", user="U1", text="again")
    assert Answer(key=KEY, text="echo: again") in outcomes


async def test_messages_a_stopped_run_was_given_are_named_by_its_notice(
    backend: Backend, effects: SideEffects
) -> None:
    """Two messages kept while the first run went on are the next run's input; a stop from
    the other replica ends that run before it answers them. The notice names both (chaos
    150123: they were consumed by the stop and named nowhere)."""
    asked = asyncio.Event()

    async def answer_while_two_more_come(call: Any) -> Any:
        for n, text in enumerate(("note pear", "note lime")):
            kept = await b.intake.keep_message(KEY, event_id=f"E{n + 2}", user="U1", text=text)
            assert kept is Kept.KEPT  # A holds the thread: kept for after this run
        return [assistant_message("noted apple")]

    async def slow(call: Any) -> Any:
        asked.set()
        await asyncio.sleep(5)
        return [assistant_message("(never: stopped first)")]

    model = ScriptedModel([ModelStep.respond(answer_while_two_more_come), ModelStep.respond(slow)])
    a, b, sink = replicas(backend, build_agent(model, effects))
    running = asyncio.create_task(
        a.handle_message(KEY, event_id="E1", user="U1", text="note apple")
    )
    await asyncio.wait_for(asked.wait(), 10)
    assert (await b.request_stop(KEY, "U1")).accepted
    outcomes = await asyncio.wait_for(running, 10)
    assert [o.text for o in outcomes if isinstance(o, Answer)] == ["noted apple"]
    [notice] = sink.notices(NoticeKind.STOPPED)
    assert "2 messages sent for this run were not answered" in notice.text
    assert notice.details == ["“note pear”", "“note lime”"]
    assert backend.open().read_inbox(KEY) == []


async def test_a_stop_after_a_restart_names_an_approved_call_inside_an_agent_tool(
    backend: Backend, effects: SideEffects
) -> None:
    """A call inside an agent used as a tool is approved (the decision's commit records it
    approved, not started), the replica drains before it runs, and a stop is served by the
    other one. The history does not hold the nested call: the notice used to name only the
    outer one ("Not run: `pay`") and left the nested call in the ledger, with nobody told
    (chaos 150104). It never started: it is named as such, and cancelled in the ledger."""

    @function_tool(needs_approval=True)
    def transfer(amount: int) -> str:
        """Move money (a side effect)."""
        effects.record("transfer", {"amount": amount})
        return f"moved {amount}"

    mailer = Agent(
        name="mailer",
        model=ScriptedModel([[function_call("transfer", {"amount": 7}, call_id="c-in")]]),
        tools=[transfer],
    )
    boss = Agent(
        name="boss",
        model=ScriptedModel([[function_call("pay", {"input": "pay 7"}, call_id="c-out")]]),
        tools=[mailer.as_tool("pay", "pays")],
    )
    a, b, sink = replicas(backend, boss)
    [request] = [o for o in await a.handle_message(KEY, event_id="E1", user="U1", text="pay 7")]
    assert isinstance(request, ApprovalRequest) and request.calls[0].call_id == "c-in"

    async def stop_then_drain() -> None:
        assert (await b.request_stop(KEY, "U1")).accepted
        a.parts.draining = True  # A shuts down before the approved call starts

    sink.when(Decided, stop_then_drain)
    await decide(a, request, "c-in")
    store = backend.open()
    approved = store.get_tool_call(KEY, "c-in")
    assert approved is not None and approved.status is ToolCallStatus.APPROVED
    await b.recover()
    [notice] = sink.notices(NoticeKind.STOPPED)
    assert "Approved, never started (not run): `transfer`" in notice.text
    assert "unknown" not in notice.text
    assert "c-in" not in [c.call_id for c in notice.settles]  # its card keeps who approved it
    assert effects.calls() == []
    cancelled = store.get_tool_call(KEY, "c-in")
    assert cancelled is not None and cancelled.status is ToolCallStatus.CANCELLED


async def test_a_message_after_a_stop_starts_a_fresh_run_in_the_same_serve(
    backend: Backend, effects: SideEffects
) -> None:
    """A stop, then a message, wait in a paused run's inbox: the run is stopped and the
    message is answered by a fresh run in the same serve. The stop's commit appends the
    closed calls' outputs to the history; the fresh run used to build on the history as it
    was before them, its commit failed as a session conflict, and the message was left
    unanswered in an idle thread (chaos seed 140000 on aws)."""
    model = ScriptedModel(
        [
            [function_call("send_email", {"to": "ana@example.com", "body": "hi"}, call_id="c1")],
            [assistant_message("A fresh start.")],
        ]
    )
    a, _, sink = replicas(backend, build_agent(model, effects))
    [request, *_] = await a.handle_message(KEY, event_id="E1", user="U1", text="email Ana")
    assert isinstance(request, ApprovalRequest)
    stopping = await a.stops.keep_stop(KEY, "U1", event_id="S1")
    assert stopping.accepted and stopping.serve
    kept = await a.intake.keep_message(KEY, event_id="E2", user="U1", text="what else is new?")
    assert kept is Kept.KEPT
    outcomes = await a.serve(KEY)
    [notice] = sink.notices(NoticeKind.STOPPED)
    assert "Not run: `send_email`" in notice.text
    assert [o.text for o in outcomes if isinstance(o, Answer)] == ["A fresh start."]
    assert effects.calls() == []
    store = backend.open()
    record = store.get(KEY)
    assert record is not None and (record.status, record.lease_owner) == (Status.IDLE, None)
    assert store.read_inbox(KEY) == []


async def test_approve_then_stop_before_the_call_says_not_run(
    backend: Backend, effects: SideEffects
) -> None:
    a, _, sink = replicas(backend, build_agent(email_then_answer(), effects))
    request = await asked(a)

    sink.when(Decided, accepted_stop(a))  # the decision is committed (the call armed), not yet run
    await decide(a, request, "call-email")
    assert effects.calls() == []
    [notice] = sink.notices(NoticeKind.STOPPED)
    assert "Stopped before it ran (not run): `send_email`" in notice.text
    assert "unknown" not in notice.text
    call = backend.open().get_tool_call(KEY, "call-email")
    assert call is not None and call.status is ToolCallStatus.CANCELLED


async def test_a_call_stopped_before_it_ran_after_a_discard_said_unknown_is_told_so(
    backend: Backend, effects: SideEffects
) -> None:
    """Approve; a stop lands, then an admin discards on another replica, after the call was
    recorded as started and before the tool itself starts: the discard reads the call as
    started (outcome unknown), the stopped serve records that it never ran, and the thread
    is told so (chaos seed 140011: the ledger said cancelled, and the thread only ever heard
    "outcome unknown")."""
    progress = StopWhileShowing(after=0)  # the call is started in the ledger when shown
    a, b, sink = replicas(backend, build_agent(email_then_answer(), effects), progress)
    request = await asked(a)

    async def stop_then_discard() -> None:
        assert (await a.request_stop(KEY, "U1")).accepted
        await b.discard(KEY, by="UADMIN")

    progress.act = stop_then_discard
    await decide(a, request, "call-email")
    assert effects.calls() == []
    [discarded] = sink.notices(NoticeKind.DISCARDED)
    assert "outcome unknown" in discarded.text  # true when it was said
    [late] = sink.notices(NoticeKind.TOOL_FINISHED_LATE)
    assert "`send_email` (call call-email)" in late.text and "never ran" in late.text
    assert sink.sent.index(late) > sink.sent.index(discarded)
    call = backend.open().get_tool_call(KEY, "call-email")
    assert call is not None and call.status is ToolCallStatus.CANCELLED


async def test_a_call_approved_then_discarded_before_it_started_is_told_not_run(
    backend: Backend, effects: SideEffects
) -> None:
    """Approve; a stop lands, then an admin discards on another replica, before the approved
    call is claimed: it never started, so the discard says it was not run (not "outcome
    unknown") and records it cancelled; the stopped serve, whose lease is gone, runs
    nothing."""
    a, b, sink = replicas(backend, build_agent(email_then_answer(), effects))
    request = await asked(a)

    discarded_by_admin: list[Outcome] = []

    async def stop_then_discard() -> None:
        assert (await a.request_stop(KEY, "U1")).accepted
        discarded_by_admin.extend(await b.discard(KEY, by="UADMIN"))

    sink.when(Decided, stop_then_discard)  # the decision is committed (the call approved)
    await decide(a, request, "call-email")
    assert effects.calls() == []
    [discarded] = sink.notices(NoticeKind.DISCARDED)
    assert "Approved, never started (not run): `send_email`" in discarded.text
    assert "unknown" not in discarded.text
    [summary] = [o for o in discarded_by_admin if isinstance(o, Discarded)]  # the admin's
    assert [c.call_id for c in summary.pending_calls] == ["call-email"]
    assert summary.unknown_calls == [] and summary.ran_calls == []
    assert sink.notices(NoticeKind.TOOL_FINISHED_LATE) == []
    call = backend.open().get_tool_call(KEY, "call-email")
    assert call is not None and call.status is ToolCallStatus.CANCELLED


class StopWhileShowing(Quiet):
    """Progress on which showing a call as running is slow (a Slack call in flight), and
    where a stop is asked meanwhile."""

    def __init__(self, after: float = 0.05) -> None:
        self.act: Callable[[], Awaitable[Any]] | None = None
        self.after = after  # how much longer the showing takes once the stop was asked

    async def step(self, key: ConversationKey, call_id: str, tool: str, state: Step) -> None:
        if state is Step.RUNNING and self.act is not None:
            act, self.act = self.act, None
            await act()
            if self.after:
                await asyncio.sleep(self.after)


async def test_a_stop_while_the_call_is_shown_running_says_it_never_ran(
    backend: Backend, effects: SideEffects
) -> None:
    """Found over real processes: the stop landed while the Slack layer showed the approved
    call as running, before the tool itself started. It never ran, and the ledger and the
    notice say so (not "outcome unknown")."""
    progress = StopWhileShowing()
    a, _, sink = replicas(backend, build_agent(email_then_answer(), effects), progress)
    store = a.store
    request = await asked(a)

    progress.act = accepted_stop(a)
    await decide(a, request, "call-email")
    assert effects.calls() == []
    [notice] = sink.notices(NoticeKind.STOPPED)
    assert "Stopped before it ran (not run): `send_email`" in notice.text
    assert "unknown" not in notice.text
    call = store.get_tool_call(KEY, "call-email")
    assert call is not None and call.status is ToolCallStatus.CANCELLED


async def test_a_stop_seen_as_the_call_would_start_is_recorded_before_the_notice(
    backend: Backend, effects: SideEffects, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found over real processes (aws): the tool saw the stop just before starting and was
    recording the call as cancelled when the stop abandoned the turn; the notice, written
    meanwhile, read the ledger first and said "outcome unknown" of a call the ledger then
    called cancelled. The record lands before the notice reads it (here a slow ledger)."""
    progress = StopWhileShowing(after=0)  # the stop is seen right after the showing
    a, _, sink = replicas(backend, build_agent(email_then_answer(), effects), progress)
    store = a.store
    request = await asked(a)
    complete = store.complete_tool_call

    def slowly(*args: Any, **kwargs: Any) -> bool:
        time.sleep(0.3)
        return complete(*args, **kwargs)

    monkeypatch.setattr(store, "complete_tool_call", slowly)

    progress.act = accepted_stop(a)
    await decide(a, request, "call-email")
    assert effects.calls() == []
    [notice] = sink.notices(NoticeKind.STOPPED)
    assert "Stopped before it ran (not run): `send_email`" in notice.text, notice.text
    call = store.get_tool_call(KEY, "call-email")
    assert call is not None and call.status is ToolCallStatus.CANCELLED


async def test_a_stop_while_the_decision_is_applied_tells_the_click(
    backend: Backend, effects: SideEffects, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found over real processes: the stop was asked on the replica applying the click,
    after it had read the click from the inbox (so the stop was not read with it). Nothing
    runs, and the click is told who stopped it, as a click read with the stop is."""
    sink = Sink()
    store = backend.open()
    a = ConversationRuntime(store, build_agent(email_then_answer(), effects), on_outcome=sink)
    request = await asked(a)
    loop, load = asyncio.get_running_loop(), store.load_checkpoint

    def load_then_stop(pointer: Any) -> Any:  # the pass has read its inbox by now
        document = load(pointer)
        monkeypatch.setattr(store, "load_checkpoint", load)
        asyncio.run_coroutine_threadsafe(a.request_stop(KEY, "U1"), loop).result(10)
        return document

    monkeypatch.setattr(store, "load_checkpoint", load_then_stop)
    outcomes = await decide(a, request, "call-email")
    assert [o.text for o in outcomes if isinstance(o, Refused)] == [
        "That call was stopped by <@U1> before it ran."
    ]
    assert not [o for o in outcomes if isinstance(o, Decided)]
    [notice] = sink.notices(NoticeKind.STOPPED)
    assert "Not run: `send_email`" in notice.text
    assert effects.calls() == [] and store.get_tool_call(KEY, "call-email") is None


async def test_the_losing_click_is_told_who_decided(backend: Backend, effects: SideEffects) -> None:
    a, b, sink = replicas(backend, build_agent(email_then_answer(), effects))
    request = await asked(a)
    for runtime, user in ((a, "U1"), (b, "U1")):  # both kept before either is served
        await runtime.intake.keep_decision(
            KEY,
            event_id=f"click-{runtime.process}",
            call_id="call-email",
            approve=True,
            user=user,
            checkpoint_version=request.checkpoint_version,
        )
    await asyncio.gather(a.serve(KEY), b.serve(KEY))
    refused = [o.text for o in sink.sent if isinstance(o, Refused)]
    assert refused == ["That call was already approved by <@U1>."]
    assert len(effects.calls("send_email")) == 1


async def test_a_discard_during_a_running_tool_records_its_result(
    backend: Backend, effects: SideEffects
) -> None:
    running, finish = asyncio.Event(), asyncio.Event()

    @function_tool(needs_approval=True)
    async def transfer(amount: int) -> str:
        """Move money (a side effect that takes a while)."""
        effects.record("transfer", {"amount": amount})
        running.set()
        await finish.wait()
        return f"moved {amount}"

    model = ScriptedModel(
        [[function_call("transfer", {"amount": 5}, call_id="call-t")], [assistant_message("ok")]]
    )
    agent = Agent(name="assistant", model=model, tools=[transfer])
    a, b, sink = replicas(backend, agent)
    request = await asked(a, "move 5")
    deciding = asyncio.create_task(decide(a, request, "call-t"))
    await running.wait()
    await b.discard(KEY, by="UADMIN")
    finish.set()
    await deciding
    [unknown] = sink.notices(NoticeKind.DISCARDED)
    assert "outcome unknown" in unknown.text  # true when it was said
    [late] = sink.notices(NoticeKind.TOOL_FINISHED_LATE)
    assert "`transfer`" in late.text and late.details == ["moved 5"]
    call = backend.open().get_tool_call(KEY, "call-t")
    assert call is not None and call.status is ToolCallStatus.COMPLETED
    assert len(effects.calls("transfer")) == 1


async def test_a_stop_whose_serve_failed_on_storage_is_applied_once_storage_answers(
    backend: Backend, effects: SideEffects
) -> None:
    """Issue 30, chaos seed 130020: a stop was acked ("Stopping it now."), then the serve
    that was to apply it failed on storage and gave the thread up as interrupted with the
    stop still in its inbox; recovery lists only running threads, so the stop waited for
    the next message for ever. Once storage answers, the sweep (here another replica's)
    applies it, with no further message."""
    a, b, sink = replicas(backend, build_agent(email_then_answer(), effects))
    request = await asked(a)
    with failing_writes(a.store) as fault, healed_as_a_serve_gives_up(fault):
        # Kept: the Stop control is acked now.
        stopping = await a.stops.keep_stop(KEY, "U1", event_id="S1")
        assert stopping.accepted and stopping.serve and stopping.text == "Stopping it now."
        fault.start()
        await a.serve(KEY)
    [failed] = sink.notices(NoticeKind.RUN_FAILED)
    assert "storage" in failed.text
    assert sink.notices(NoticeKind.STOPPED) == []
    record = b.store.get(KEY)
    assert record is not None and record.lease_owner is None
    await b.recover()
    [notice] = sink.notices(NoticeKind.STOPPED)
    assert notice.text.startswith("Stopped by <@U1>.") and "Not run: `send_email`" in notice.text
    assert [c.call_id for c in notice.settles] == ["call-email"]
    assert sink.notices(NoticeKind.RESUMED_AFTER_RESTART) == []  # nothing resumed
    assert effects.calls() == []
    record = b.store.get(KEY)
    assert record is not None and record.status is Status.IDLE and record.stop_by is None
    assert b.store.read_inbox(KEY) == []
    late = await decide(b, request, "call-email")
    assert effects.calls() == [] and not any(isinstance(o, Answer) for o in late)
    assert "/resume" not in failed.text  # it said the stop would be seen to, not to resume


async def test_a_stop_sent_again_after_it_found_nothing_running_stops_no_later_run(
    backend: Backend, effects: SideEffects
) -> None:
    """A stop that finds nothing running (the run it aimed at had just posted its answer)
    is answered so and kept nowhere. Slack sending the same request again while a later
    run waits for approval is a duplicate: that run goes on (the chaos soak's seed 490037,
    a session stop sent again after its run). A stop of its own still stops it."""
    model = ScriptedModel(
        [
            [assistant_message("Hello.")],
            [function_call("send_email", {"to": "ana@example.com", "body": "hi"}, call_id="c1")],
        ]
    )
    a, b, sink = replicas(backend, build_agent(model, effects))
    await a.handle_message(KEY, event_id="E1", user="U1", text="hi")
    first = await b.stops.keep_stop(KEY, "U1", event_id="S1")
    assert (first.accepted, first.text) == (False, "Nothing is running there right now.")
    [request, *_] = await a.handle_message(KEY, event_id="E2", user="U1", text="email Ana")
    assert isinstance(request, ApprovalRequest)
    again = await b.stops.keep_stop(KEY, "U1", event_id="S1")
    assert (again.accepted, again.duplicate) == (False, True)
    assert sink.notices(NoticeKind.STOPPED) == []
    record = backend.open().get(KEY)
    assert record is not None and record.status is Status.AWAITING_APPROVAL
    assert record.stop_by is None
    assert (await b.stops.keep_stop(KEY, "U1", event_id="S2")).accepted
