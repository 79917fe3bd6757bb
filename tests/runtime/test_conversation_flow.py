"""The conversation runtime with `agents.testing.ScriptedModel`, on both backends."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.runtime import (
    Answer,
    ConversationRuntime,
    Decided,
    Duplicate,
    Notice,
    NoticeKind,
    Refused,
    StatusReply,
)
from bot.runtime.envelope import Envelope
from bot.settings import RuntimeSettings
from storage import Status, Store, ToolCallStatus
from testkit.runtime import (
    KEY,
    SideEffects,
    asked,
    build_agent,
    decide,
    email_then_answer,
    history,
    kinds,
    record_of,
)


def runtime(
    store: Store, model: ScriptedModel, effects: SideEffects, **settings: Any
) -> ConversationRuntime:
    agent = build_agent(model, effects, approval=bool(settings.pop("approval", True)))
    return ConversationRuntime(store, agent, RuntimeSettings(**settings))


async def test_plain_question_gets_an_answer(store: Store, effects: SideEffects) -> None:
    model = ScriptedModel([[assistant_message("Hello!")]])
    rt = runtime(store, model, effects)
    outcomes = await rt.handle_message(KEY, event_id="Ev1", user="U1", text="hi")
    assert outcomes == [Answer(key=KEY, text="Hello!")]
    assert kinds(store) == ["user", "message"]
    record = store.get(KEY)
    assert record is not None and (record.status, record.lease_owner) == (Status.IDLE, None)
    assert store.read_inbox(KEY) == []


async def test_a_finished_run_keeps_no_run_state(store: Store, effects: SideEffects) -> None:
    """Nothing resumes a finished run, so its checkpoint carries no RunState (serialising
    the run every turn was a tenth of a turn's CPU); the next message starts from the
    history, which the session holds."""
    model = ScriptedModel([[assistant_message("Hello!")], [assistant_message("Again!")]])
    rt = runtime(store, model, effects)
    await rt.handle_message(KEY, event_id="Ev1", user="U1", text="hi")
    record = store.get(KEY)
    assert record is not None and record.checkpoint is not None and record.checkpoint.finished
    envelope = Envelope.model_validate(store.load_checkpoint(record.checkpoint))
    assert envelope.finished and envelope.run_state == {}
    outcomes = await rt.handle_message(KEY, event_id="Ev2", user="U1", text="more")
    assert outcomes == [Answer(key=KEY, text="Again!")]
    assert kinds(store) == ["user", "message", "user", "message"]


async def test_duplicate_event_is_handled_once(store: Store, effects: SideEffects) -> None:
    model = ScriptedModel([[assistant_message("Hello!")]])
    rt = runtime(store, model, effects)
    await rt.handle_message(KEY, event_id="Ev1", user="U1", text="hi")
    again = await rt.handle_message(KEY, event_id="Ev1", user="U1", text="hi")
    assert again == [Duplicate(key=KEY, event_id="Ev1")]
    assert kinds(store) == ["user", "message"]


def lookup_then_answer() -> ScriptedModel:
    return ScriptedModel(
        [
            [function_call("lookup", {"topic": "tides"}, call_id="c1")],
            [assistant_message("Tides are lunar.")],
        ]
    )


async def test_a_read_only_tool_and_the_answer_share_one_checkpoint(
    store: Store, effects: SideEffects
) -> None:
    """A turn whose tools are harmless to run again needs no checkpoint of its own: the run
    goes on to the answer, kept by one commit with all four items."""
    rt = runtime(store, lookup_then_answer(), effects)
    outcomes = await rt.handle_message(KEY, event_id="Ev1", user="U1", text="tides?")
    assert outcomes == [Answer(key=KEY, text="Tides are lunar.")]
    assert kinds(store) == ["user", "function_call", "function_call_output", "message"]
    record = store.get(KEY)
    assert record is not None and record.checkpoint is not None
    assert record.checkpoint.version == 1
    assert effects.calls("lookup") == [{"tool": "lookup", "topic": "tides"}]


async def test_with_no_interval_every_turn_is_checkpointed(
    store: Store, effects: SideEffects
) -> None:
    rt = runtime(store, lookup_then_answer(), effects, checkpoint_interval=0)
    outcomes = await rt.handle_message(KEY, event_id="Ev1", user="U1", text="tides?")
    assert outcomes == [Answer(key=KEY, text="Tides are lunar.")]
    assert kinds(store) == ["user", "function_call", "function_call_output", "message"]
    record = store.get(KEY)
    assert record is not None and record.checkpoint is not None
    assert record.checkpoint.version == 2  # one checkpoint per model turn
    assert effects.calls("lookup") == [{"tool": "lookup", "topic": "tides"}]


async def test_a_long_run_of_harmless_turns_is_checkpointed_on_the_way(
    store: Store, effects: SideEffects
) -> None:
    """Past the interval, the turn in progress ends with a checkpoint: a crash then repeats
    no more than an interval's work."""

    def slow(output: list[Any]) -> ModelStep:
        async def respond(call: Any) -> Any:
            await asyncio.sleep(0.3)  # each model call: more than half the interval
            return output

        return ModelStep.respond(respond)

    turns = [slow([function_call("lookup", {"topic": f"t{n}"}, call_id=f"c{n}")]) for n in range(4)]
    model = ScriptedModel([*turns, slow([assistant_message("Done.")])])
    rt = runtime(store, model, effects, checkpoint_interval=0.5)
    outcomes = await rt.handle_message(KEY, event_id="Ev1", user="U1", text="look it all up")
    assert outcomes == [Answer(key=KEY, text="Done.")]
    record = store.get(KEY)
    assert record is not None and record.checkpoint is not None
    # Every second turn or so (five with a checkpoint per turn, one without the interval).
    assert 1 < record.checkpoint.version < 5
    assert len(effects.calls("lookup")) == 4
    assert kinds(store).count("function_call_output") == 4


async def test_approval_flow_by_button(store: Store, effects: SideEffects) -> None:
    rt = runtime(store, email_then_answer(), effects)
    request = await asked(rt, event_id="Ev1")
    assert [c.tool_name for c in request.calls] == ["send_email"]
    assert effects.calls() == []
    assert record_of(store, KEY).status is Status.AWAITING_APPROVAL

    stranger = await decide(rt, request, "call-email", user="U2")
    assert [type(o) for o in stranger] == [Refused]
    assert (
        isinstance(stranger[0], Refused) and stranger[0].text == "Only <@U1> can decide this one."
    )
    assert effects.calls() == []

    # A click names its call: any copy of the request counts while the call awaits.
    outcomes = await rt.decide(
        KEY,
        call_id="call-email",
        approve=True,
        user="U1",
        checkpoint_version=request.checkpoint_version - 1,
    )
    assert [type(o) for o in outcomes] == [Decided, Answer]
    assert effects.calls("send_email") == [{"tool": "send_email", "to": "ana@example.com"}]
    duplicate = await decide(rt, request, "call-email")
    assert [type(o) for o in duplicate] == [Refused]
    assert isinstance(duplicate[0], Refused)
    assert duplicate[0].text == "That call was already approved by <@U1>."
    assert len(effects.calls("send_email")) == 1
    assert kinds(store) == ["user", "function_call", "function_call_output", "message"]
    assert record_of(store, KEY).status is Status.IDLE


async def test_approver_may_reject_with_a_reason(store: Store, effects: SideEffects) -> None:
    model = email_then_answer(text="OK, I did not send it.")
    rt = runtime(store, model, effects, approvers="U7")
    request = await asked(rt, event_id="Ev1")
    outcomes = await decide(rt, request, "call-email", approve=False, user="U7", reason="not today")
    assert [type(o) for o in outcomes] == [Decided, Answer]
    assert effects.calls() == []
    output = history(store)[2]
    assert output["type"] == "function_call_output" and "not today" in str(output["output"])


async def test_reply_while_paused(store: Store, effects: SideEffects) -> None:
    model = email_then_answer()
    model.extend([[assistant_message("About the weather: sunny.")]])
    rt = runtime(store, model, effects)
    await asked(rt, event_id="Ev1")

    # A decision word from someone who may not decide is refused to them, and not kept.
    other = await rt.handle_message(KEY, event_id="Ev2", user="U2", text="yes")
    assert [type(o) for o in other] == [Refused]
    assert isinstance(other[0], Refused)
    # In the words a click gets: one refusal, whichever way the decision came.
    assert other[0].user == "U2" and other[0].text == "Only <@U1> can decide this one."
    # Any other reply is kept for the agent; the request in the thread stays valid.
    kept = await rt.handle_message(KEY, event_id="Ev3", user="U1", text="and the weather?")
    assert [type(o) for o in kept] == [Notice]
    assert isinstance(kept[0], Notice) and kept[0].kind is NoticeKind.MESSAGE_KEPT
    assert effects.calls() == []

    outcomes = await rt.handle_message(KEY, event_id="Ev4", user="U1", text="Approve!")
    assert [type(o) for o in outcomes] == [Decided, Answer, Answer]
    assert [o.text for o in outcomes if isinstance(o, Answer)] == [
        "Done: email sent.",
        "About the weather: sunny.",
    ]
    assert len(effects.calls("send_email")) == 1
    users = [i["content"] for i in history(store) if i.get("role") == "user"]
    assert users == ["<@U1>: email Ana", "<@U1>: and the weather?"]  # attributed
    model.assert_complete()


async def test_resume_says_why_not(store: Store, effects: SideEffects) -> None:
    rt = runtime(store, ScriptedModel([[assistant_message("Hi")]]), effects)
    await rt.handle_message(KEY, event_id="Ev1", user="U1", text="hi")
    [reply] = await rt.scheduler.resume(KEY)
    assert isinstance(reply, StatusReply) and "nothing to resume" in reply.text


async def test_resume_points_to_the_pending_approval(store: Store, effects: SideEffects) -> None:
    rt = runtime(store, email_then_answer(), effects)
    request = await asked(rt, event_id="Ev1")
    [again] = await rt.scheduler.resume(KEY)
    # No second copy of the request: the reply points at the one in the thread.
    assert isinstance(again, StatusReply)
    assert "`send_email`" in again.text and "<@U1> can decide" in again.text
    record = store.get(KEY)
    assert record is not None and record.status is Status.AWAITING_APPROVAL
    assert record.checkpoint_version == request.checkpoint_version


async def test_model_failure_interrupts_and_resume_retries(
    store: Store, effects: SideEffects
) -> None:
    model = ScriptedModel([RuntimeError("model is down"), [assistant_message("Back.")]])
    rt = runtime(store, model, effects)
    [notice] = await rt.handle_message(KEY, event_id="Ev1", user="U1", text="hi")
    assert isinstance(notice, Notice) and notice.kind is NoticeKind.RUN_FAILED
    record = store.get(KEY)
    assert record is not None and record.status is Status.INTERRUPTED
    assert len(store.read_inbox(KEY)) == 1  # the message is kept
    assert await rt.scheduler.resume(KEY) == [Answer(key=KEY, text="Back.")]
    assert kinds(store) == ["user", "message"]
    assert store.read_inbox(KEY) == []


async def test_a_call_that_needs_no_person_waits_with_one_that_does(
    store: Store, effects: SideEffects
) -> None:
    """One model turn asks for a side effect that needs no approval and one that does: the
    first waits with the second (it has not run) and runs once when the second is decided;
    it is not reported as "outcome unknown". (Found by the chaos soak, seed 50044.)"""

    @function_tool
    def post_note(text: str) -> str:
        """Post a note (a side effect that needs no approval)."""
        effects.record("post_note", {"text": text})
        return f"posted {text}"

    model = ScriptedModel(
        [
            [
                function_call("post_note", {"text": "hi"}, call_id="call-note"),
                function_call(
                    "send_email", {"to": "ana@example.com", "body": "hi"}, call_id="call-email"
                ),
            ],
            [assistant_message("Both done.")],
        ]
    )
    agent = build_agent(model, effects)
    agent.tools.append(post_note)
    rt = ConversationRuntime(store, agent, RuntimeSettings())
    request = await asked(rt, "note and email", event_id="Ev1")
    assert [c.tool_name for c in request.calls] == ["send_email"]
    assert effects.calls() == []
    outcomes = await decide(rt, request, "call-email")
    assert [type(o) for o in outcomes] == [Decided, Answer], outcomes
    # Each ran once (the SDK runs a turn's tools concurrently: in either order).
    assert sorted(c["tool"] for c in effects.calls()) == ["post_note", "send_email"]
    for call_id in ("call-note", "call-email"):
        recorded = store.get_tool_call(KEY, call_id)
        assert recorded is not None and recorded.status is ToolCallStatus.COMPLETED
    outputs = [i["output"] for i in history(store) if i.get("type") == "function_call_output"]
    assert sorted(outputs) == ["posted hi", "sent to ana@example.com"]
