"""Long conversations through the real runtime (in process, `agents.testing.ScriptedModel`
answering both the runs and the summaries): every request within the model's window,
earlier turns summed up once and stored with the checkpoint that first uses them, the
stored history exact, the same view after a restart, and plain notices when a request
cannot fit or the model service refuses it for good."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from agents import Agent
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from bot import metrics
from bot.runtime import (
    Answer,
    ConversationRuntime,
    Notice,
    NoticeKind,
)
from bot.runtime.summaries import SUMMARY_INSTRUCTIONS
from bot.runtime.window_budget import Budget, agent_tools_size, item_size
from bot.settings import RuntimeSettings
from storage import Status, Store
from storage.local import LocalStore
from testkit.runtime import KEY, SideEffects, asked, build_agent, decide, history, record_of
from tests.runtime.test_fitting import api_error

SUMMARY_MARK = SUMMARY_INSTRUCTIONS.split("{", 1)[0][:40]
TOKENS = 3_000  # a window of 6,000 estimated bytes for input (a third left for answers)


class Model:
    """Answers runs with "answer N" and summary requests with "summary N: ..." (or fails
    them), recording both."""

    def __init__(self, *, summaries_fail: bool = False, steps: int = 200) -> None:
        self.summaries_fail = summaries_fail
        self.answered = 0
        self.summaries: list[ModelCall] = []
        self.runs: list[ModelCall] = []
        self.scripted = ScriptedModel([ModelStep.respond(self.respond) for _ in range(steps)])

    def respond(self, call: ModelCall) -> Any:
        if (call.system_instructions or "").startswith(SUMMARY_MARK):
            self.summaries.append(call)
            if self.summaries_fail:
                return RuntimeError("the model service is down")
            return [assistant_message(f"summary {len(self.summaries)}: they chatted")]
        self.runs.append(call)
        if _pending_call(call.input):
            return [assistant_message("sent.")]
        if "email" in str(call.input[-1]):
            return [
                function_call(
                    "send_email", {"to": "ana@example.com", "body": "hi"}, call_id="c-mail"
                )
            ]
        self.answered += 1
        return [assistant_message(f"answer {self.answered}")]


def _pending_call(given: list[Any]) -> bool:
    return bool(given) and given[-1].get("type") == "function_call_output"


def runtime(
    store: Store, model: Model, effects: SideEffects, **settings: Any
) -> ConversationRuntime:
    agent = build_agent(model.scripted, effects)
    return ConversationRuntime(store, agent, RuntimeSettings(context_tokens=TOKENS, **settings))


def room(rt: ConversationRuntime) -> int:
    return Budget.for_model(None, TOKENS).room(None, agent_tools_size(rt.agent))


def message(number: int) -> str:
    return f"message {number}: " + "words " * 130  # ~800 characters


async def talk(rt: ConversationRuntime, first: int, last: int) -> list[Any]:
    outcomes = []
    for number in range(first, last + 1):
        outcomes += await rt.handle_message(
            KEY, event_id=f"Ev{number}", user="U1", text=message(number)
        )
    return outcomes


def notes(call: ModelCall) -> list[str]:
    return [i["content"] for i in call.input if i.get("role") == "developer"]


async def test_a_long_thread_is_summed_up_once_per_stretch_stored_and_reused(
    store: Store, effects: SideEffects
) -> None:
    model = Model()
    rt = runtime(store, model, effects)
    made_before = metrics.CONTEXT_SUMMARIES.labels(outcome="made")._value.get()
    summed_up_to: list[int] = []
    for number in range(1, 21):
        outcomes = await talk(rt, number, number)
        assert outcomes == [Answer(key=KEY, text=f"answer {number}")]
        summed_up_to.append(record_of(store, KEY).summary_seq)
    # Every request the runs made fits the room the budget leaves.
    for call in model.runs:
        assert sum(item_size(i) for i in call.input) <= room(rt)
    # Summaries were made, each once, each folding the one before (incremental).
    made = len(model.summaries)
    assert made >= 2
    assert len(set(summed_up_to) - {0}) == made  # each stored once, with its checkpoint
    assert summed_up_to == sorted(summed_up_to)
    for number, call in enumerate(model.summaries[1:], start=1):
        assert call.input[0]["content"].startswith(f"Summary so far:\nsummary {number}: ")
    assert metrics.CONTEXT_SUMMARIES.labels(outcome="made")._value.get() - made_before == made
    record = record_of(store, KEY)
    stored = store.read_summary(record)
    assert stored is not None and stored.text == f"summary {made}: they chatted"
    # The run after the last summary was given it, first.
    last = model.runs[-1]
    assert notes(last)[0].endswith(stored.text)
    # The stored history is exactly what was said: no summary, no note, nothing cut.
    said = history(store)
    assert [i["content"] for i in said if i.get("role") == "user"] == [
        f"<@U1>: {message(n)}" for n in range(1, 21)
    ]
    assert all(i.get("role") != "developer" for i in said) and len(said) == 40

    # A restart: the summary is read back, not made again; the view is the same.
    again = runtime(store, model, effects)
    assert await talk(again, 21, 21) == [Answer(key=KEY, text="answer 21")]
    assert len(model.summaries) == made
    assert notes(model.runs[-1])[0].endswith(stored.text)


@pytest.mark.parametrize("summaries", ["failing", "off"])
async def test_without_a_summary_the_request_says_how_much_was_left_out(
    local_store: LocalStore, effects: SideEffects, summaries: str
) -> None:
    model = Model(summaries_fail=summaries == "failing")
    rt = runtime(local_store, model, effects, summaries=summaries != "off")
    outcomes = await talk(rt, 1, 14)
    assert outcomes == [Answer(key=KEY, text=f"answer {n}") for n in range(1, 15)]
    assert record_of(local_store, KEY).summary_seq == 0
    [note] = notes(model.runs[-1])
    assert note.endswith("earlier messages of this thread left out]")
    assert all(sum(item_size(i) for i in call.input) <= room(rt) for call in model.runs)
    assert bool(model.summaries) == (summaries == "failing")  # tried only when on


async def test_a_run_resumed_after_a_restart_is_given_the_same_view(
    store: Store, effects: SideEffects
) -> None:
    model = Model()
    rt = runtime(store, model, effects)
    await talk(rt, 1, 14)
    assert model.summaries
    request = await asked(rt, "email ana please", event_id="EvE")
    before = model.runs[-1]
    restarted = runtime(store, model, effects)
    outcomes = await decide(restarted, request, request.calls[0].call_id)
    assert Answer(key=KEY, text="sent.") in outcomes
    after = model.runs[-1]
    # The continued run's request: the same notes and history, then the call's output.
    assert after.input[: len(before.input)] == before.input
    assert notes(after)[0].startswith("Summary of this thread's earlier messages")
    assert after.input[-1]["type"] == "function_call_output"


async def test_a_request_that_cannot_fit_is_told_in_plain_words_and_the_thread_goes_on(
    local_store: LocalStore, effects: SideEffects
) -> None:
    model = ScriptedModel([[assistant_message("never")]])
    agent = Agent(name="assistant", model=model, instructions="Be brief. " * 220)
    rt = ConversationRuntime(local_store, agent, RuntimeSettings(context_tokens=1_000))
    [notice] = await rt.handle_message(KEY, event_id="Ev1", user="U1", text="hello")
    assert isinstance(notice, Notice) and notice.kind is NoticeKind.TOO_LARGE
    assert "does not fit the model's context window" in notice.text
    assert "instructions and tools alone" in notice.text
    assert "/resume" not in notice.text and notice.reference
    record = record_of(local_store, KEY)
    assert record.status is Status.IDLE and local_store.read_inbox(KEY) == []
    assert history(local_store) == [] and model.calls == ()


async def test_a_refusal_of_the_request_itself_does_not_advise_trying_again(
    local_store: LocalStore, effects: SideEffects
) -> None:
    refused = api_error(
        400,
        {
            "message": "No tool call found for function call output with call_id c1.",
            "type": "invalid_request_error",
            "param": "input",
            "code": None,
        },
    )
    model = ScriptedModel([refused])
    rt = ConversationRuntime(local_store, build_agent(model, effects), RuntimeSettings())
    [notice] = await rt.handle_message(KEY, event_id="Ev1", user="U1", text="hello")
    assert isinstance(notice, Notice) and notice.kind is NoticeKind.RUN_FAILED
    assert "the model service refused the request" in notice.text
    assert "send a message" not in notice.text and "/resume" not in notice.text
    assert record_of(local_store, KEY).status is Status.INTERRUPTED
    assert isinstance(refused, openai.BadRequestError) and json.dumps(refused.body)
