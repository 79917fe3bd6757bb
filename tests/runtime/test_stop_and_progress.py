"""Stopping a run on request, across replicas, and the progress a run shows while it works
(status, streamed text, tool steps), on both backends."""

from __future__ import annotations

import asyncio
from typing import Any

from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.runtime import (
    Answer,
    ConversationRuntime,
    Kept,
    Notice,
    NoticeKind,
    Refused,
)
from bot.runtime.progress import Step
from bot.settings import RuntimeSettings
from storage import ConversationKey, Status, Store, ToolCallStatus
from testkit.runtime import KEY, SideEffects, asked, build_agent, decide, echo_model, history
from tests.conftest import Backend


class Recorder:
    """A chat surface that writes down what it is shown."""

    def __init__(self) -> None:
        self.shown: list[tuple[str, ...]] = []

    async def queued(self, key: ConversationKey, requester: str | None) -> None:
        self.shown.append(("queued", str(requester)))

    async def begin(self, key: ConversationKey, requester: str | None) -> None:
        self.shown.append(("begin", str(requester)))

    async def text(self, key: ConversationKey, delta: str) -> None:
        self.shown.append(("text", delta))

    async def step(self, key: ConversationKey, call_id: str, tool: str, state: Step) -> None:
        self.shown.append(("step", tool, state.value))

    async def end(self, key: ConversationKey) -> None:
        self.shown.append(("end",))


def slow_model(started: asyncio.Event, then: list[Any]) -> ScriptedModel:
    async def respond(call: Any) -> Any:
        started.set()
        await asyncio.sleep(30)  # a model call that takes its time
        return [assistant_message("(never: stopped first)")]

    return ScriptedModel([ModelStep.respond(respond), *then])


async def test_stop_abandons_the_model_call_and_the_next_message_starts_fresh(
    store: Store, backend: Backend, effects: SideEffects
) -> None:
    started = asyncio.Event()
    model = slow_model(started, [[assistant_message("A fresh start.")]])
    rt = ConversationRuntime(store, build_agent(model, effects), owner="A")
    running = asyncio.create_task(
        rt.handle_message(KEY, event_id="E1", user="U1", text="write me an essay")
    )
    await started.wait()
    # Another replica receives the Stop: a durable request, learned by the holder.
    other = ConversationRuntime(backend.open(), build_agent(echo_model(), effects), owner="B")
    asked = await asyncio.wait_for(other.request_stop(KEY, "U1"), 10)
    assert asked.accepted
    outcomes = await asyncio.wait_for(running, 10)
    [notice] = [o for o in outcomes if isinstance(o, Notice)]
    assert notice.kind is NoticeKind.STOPPED and "Stopped by <@U1>" in notice.text
    assert not any(isinstance(o, Answer) for o in outcomes)  # nothing after the stop
    record = store.get(KEY)
    assert record is not None and (record.status, record.lease_owner) == (Status.IDLE, None)
    assert record.stop_by is None and store.read_inbox(KEY) == []
    again = await rt.handle_message(KEY, event_id="E2", user="U1", text="never mind")
    assert [o.text for o in again if isinstance(o, Answer)] == ["A fresh start."]


async def test_a_side_effect_under_way_finishes_and_is_said_to_have_run(
    store: Store, effects: SideEffects
) -> None:
    from agents import Agent, function_tool

    tool_started = asyncio.Event()

    @function_tool
    async def transfer(amount: int) -> str:
        """Move money (a side effect)."""
        tool_started.set()
        await asyncio.sleep(0.5)
        effects.record("transfer", {"amount": amount})
        return "moved"

    model = ScriptedModel(
        [
            [function_call("transfer", {"amount": 5}, call_id="call-t")],
            [assistant_message("(the model call after the tool: abandoned)")],
        ]
    )
    rt = ConversationRuntime(store, Agent(name="assistant", model=model, tools=[transfer]))
    running = asyncio.create_task(
        rt.handle_message(KEY, event_id="E1", user="U1", text="transfer 5")
    )
    await tool_started.wait()
    assert (await rt.request_stop(KEY, "U1")).accepted  # same process: at once
    outcomes = await asyncio.wait_for(running, 10)
    [notice] = [o for o in outcomes if isinstance(o, Notice)]
    assert notice.kind is NoticeKind.STOPPED
    assert "Already done" in notice.text and "`transfer`" in notice.text
    assert len(effects.calls("transfer")) == 1
    call = store.get_tool_call(KEY, "call-t")
    assert call is not None and call.status is ToolCallStatus.COMPLETED
    assert history(store)[-1] == {
        "type": "function_call_output",
        "call_id": "call-t",
        "output": "moved",
    }


async def test_stop_is_refused_to_strangers_and_when_nothing_runs(
    store: Store, effects: SideEffects
) -> None:
    rt = ConversationRuntime(store, build_agent(echo_model(), effects))
    await rt.handle_message(KEY, event_id="E1", user="U1", text="hi")
    stranger = await rt.request_stop(KEY, "U9")
    idle = await rt.request_stop(KEY, "U1")
    assert not stranger.accepted and not idle.accepted
    assert "Nothing is running" in idle.text
    # `stop` while nothing runs is an ordinary message for the agent.
    kept = await rt.intake.keep_message(KEY, event_id="E2", user="U1", text="stop")
    assert kept is Kept.KEPT


async def test_who_may_stop_a_run(store: Store, effects: SideEffects) -> None:
    """The person who started the run, approvers and admins; anyone else's `stop` is
    answered privately, neither kept nor given to the model, and makes no one a participant
    (r19: their second `stop` used to stop the starter's run)."""
    started = asyncio.Event()
    told: list[Any] = []

    async def sink(outcome: Any, *_: Any) -> None:
        told.append(outcome)

    settings = RuntimeSettings(approvers=frozenset({"UAPP"}), admins=frozenset({"UADM"}))
    model = slow_model(started, [[assistant_message("again")] for _ in range(3)])
    rt = ConversationRuntime(store, build_agent(model, effects), settings, on_outcome=sink)
    running = asyncio.create_task(rt.handle_message(KEY, event_id="E1", user="U1", text="go"))
    await started.wait()
    await rt.intake.keep_message(KEY, event_id="E0", user="U2", text="me too", create=False)
    for attempt in range(2):  # a participant who did not start it, twice
        kept = await rt.intake.keep_message(KEY, event_id=f"S{attempt}", user="U2", text="stop")
        assert kept is Kept.STOP_REFUSED
    assert (await rt.request_stop(KEY, "U9")).refused  # the Stop button, a stranger
    await asyncio.sleep(0)
    record = store.get(KEY)
    assert record is not None and record.stop_by is None and record.participants == {"U1", "U2"}
    assert [entry.payload for entry in store.read_inbox(KEY) if "stop" in entry.payload] == []
    refusals = [o for o in told if isinstance(o, Refused)]
    assert [(r.user, "started this run" in r.text) for r in refusals] == [("U2", True)] * 2
    assert not running.done()
    assert [rt.queries.may_stop(record, u) for u in ("U1", "UADM", "UAPP", "U2")] == [True] * 3 + [
        False
    ]
    assert (await rt.request_stop(KEY, "UAPP")).accepted
    notice = next(o for o in await running if isinstance(o, Notice))
    assert notice.kind is NoticeKind.STOPPED and "<@UAPP>" in notice.text


async def test_whoever_starts_the_next_run_may_stop_it_and_the_last_starter_may_not(
    backend: Backend, effects: SideEffects
) -> None:
    """A run's starter is the author of the message that starts it, named on the record by
    the thread's holder before the run does anything, never by the keep of a message (issue
    49): U2's reply held while U1's run waits for approval starts the next run once that one
    finishes, and U2's next question starts another; each is U2's to stop, not U1's."""
    store = backend.open(lease_seconds=5, lease_skew_seconds=0.2)
    started = asyncio.Event()

    async def slow(call: Any) -> Any:
        started.set()
        await asyncio.sleep(30)  # a model call that takes its time
        return [assistant_message("(never: stopped first)")]

    model = ScriptedModel(
        [
            [
                function_call(
                    "send_email", {"to": "ana@example.com", "body": "hi"}, call_id="call-email"
                )
            ],
            [assistant_message("Sent.")],
            ModelStep.respond(slow),
            [assistant_message("Hello again.")],
            ModelStep.respond(slow),
        ]
    )
    rt = ConversationRuntime(store, build_agent(model, effects))
    request = await asked(rt)
    assert await rt.intake.keep_message(KEY, event_id="E2", user="U2", text="and me?") is Kept.KEPT
    await rt.serve(KEY)  # held for after the run, which still waits for U1
    assert store.get(KEY).run_by == "U1"  # type: ignore[union-attr]
    approved = asyncio.create_task(decide(rt, request, "call-email"))
    await started.wait()  # U1's run answered; U2's held message started the next one
    record = store.get(KEY)
    assert record is not None and record.run_by == "U2"
    assert [rt.queries.may_stop(record, u) for u in ("U1", "U2")] == [False, True]
    assert (await rt.request_stop(KEY, "U1")).refused
    assert (await rt.request_stop(KEY, "U2")).accepted
    outcomes = await approved
    assert [o.text for o in outcomes if isinstance(o, Answer)] == ["Sent."]
    stopped = [o for o in outcomes if isinstance(o, Notice)]
    assert stopped[-1].kind is NoticeKind.STOPPED and "<@U2>" in stopped[-1].text
    # U1 starts a run, then U2 one in the same thread: each named as its run begins.
    answered = await rt.handle_message(KEY, event_id="E3", user="U1", text="hi")
    assert [o.text for o in answered if isinstance(o, Answer)] == ["Hello again."]
    assert store.get(KEY).run_by == "U1"  # type: ignore[union-attr]
    started.clear()
    running = asyncio.create_task(rt.handle_message(KEY, event_id="E4", user="U2", text="and now?"))
    await started.wait()
    assert (await rt.request_stop(KEY, "U1")).refused
    assert (await rt.request_stop(KEY, "U2")).accepted
    notice = next(o for o in await running if isinstance(o, Notice))
    assert notice.kind is NoticeKind.STOPPED and "<@U2>" in notice.text


async def test_progress_shows_status_text_and_steps(store: Store, effects: SideEffects) -> None:
    recorder = Recorder()
    model = ScriptedModel(
        [
            [function_call("lookup", {"topic": "tides"}, call_id="c1")],
            [assistant_message("Tides are lunar.")],
        ]
    )
    rt = ConversationRuntime(store, build_agent(model, effects), progress=recorder)
    outcomes = await rt.handle_message(KEY, event_id="E1", user="U1", text="tides?")
    assert [o.text for o in outcomes if isinstance(o, Answer)] == ["Tides are lunar."]
    assert recorder.shown[0] == ("begin", "U1") and recorder.shown[-1] == ("end",)
    steps = [s for s in recorder.shown if s[0] == "step"]
    assert steps == [("step", "lookup", "running"), ("step", "lookup", "done")]
    text = "".join(s[1] for s in recorder.shown if s[0] == "text")
    assert text == "Tides are lunar."


async def test_progress_shows_a_call_waiting_for_approval(
    store: Store, effects: SideEffects
) -> None:
    from testkit.runtime import email_then_answer

    recorder = Recorder()
    rt = ConversationRuntime(store, build_agent(email_then_answer(), effects), progress=recorder)
    await rt.handle_message(KEY, event_id="E1", user="U1", text="email Ana")
    assert ("step", "send_email", "waiting") in recorder.shown
    assert recorder.shown[-1] == ("end",)


async def test_a_reply_stop_in_a_full_thread_stops_the_run_and_is_not_a_message(
    backend: Backend, effects: SideEffects
) -> None:
    """The reply `stop` while the thread's backlog is full is a stop like any other: never
    refused at the cap (a full thread is the one whose run most needs stopping, issue 49),
    nor turned into an ordinary message, which the full thread would refuse publicly as a
    message to send again later (the chaos soak's seed 130013); the run is stopped."""
    store = backend.open(lease_seconds=5, lease_skew_seconds=0.2, backlog_limit=2)
    told: list[Any] = []

    async def sink(outcome: Any, *_: Any) -> None:
        told.append(outcome)

    started = asyncio.Event()
    rt = ConversationRuntime(store, build_agent(slow_model(started, []), effects), on_outcome=sink)
    running = asyncio.create_task(rt.handle_message(KEY, event_id="E1", user="U1", text="hi"))
    await started.wait()
    for number in (2, 3):  # the backlog fills up
        await rt.intake.keep_message(KEY, event_id=f"E{number}", user="U1", text=f"more {number}")
    full = await rt.intake.keep_message(KEY, event_id="E5", user="U1", text="one more")
    assert full is Kept.NOT_TAKEN  # the thread is full indeed
    kept = await rt.intake.keep_message(KEY, event_id="E4", user="U1", text="stop")
    assert kept is Kept.STOPPING
    outcomes = await asyncio.wait_for(running, 10)
    [notice] = [o for o in outcomes if isinstance(o, Notice) and o.kind is NoticeKind.STOPPED]
    assert "Stopped by <@U1>" in notice.text
    assert not [o for o in told if isinstance(o, Refused)]
    record = store.get(KEY)
    assert record is not None and "E4" not in [r.event_id for r in record.refused]
