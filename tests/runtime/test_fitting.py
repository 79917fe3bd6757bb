"""Fitting a model request into the model's window (`bot.runtime.fitting`), what a run is
given of the history (`summaries.plan_history`), the size estimate and budgets
(`window_budget`), and telling a "too large" refusal from other failures: pure functions,
tested as such."""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx2
import openai
import pytest
from agents import Agent
from agents.models import get_default_model
from agents.testing import ScriptedModel

from bot.runtime.fitting import TooLarge, fit, groups, run_start
from bot.runtime.model_window import ContextWindow
from bot.runtime.run_failures import what_to_do
from bot.runtime.summaries import HistoryPlan, plan_history, transcript
from bot.runtime.window_budget import Budget, item_size, known_window
from bot.runtime.window_refusals import is_context_refusal, is_permanent_refusal
from bot.settings import RuntimeSettings


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def answer(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call(call_id: str, name: str = "lookup") -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": "{}"}


def output(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def reasoning(rid: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": rid, "summary": [], "encrypted_content": "e" * 300}


def history(turns: int, size: int = 4_000) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for turn in range(turns):
        items += [user(f"q{turn} " + "w" * size), reasoning(f"r{turn}"), call(f"c{turn}")]
        items += [output(f"c{turn}", f"o{turn} " + "x" * size), answer(f"a{turn} " + "y" * 200)]
    return items


def text_of(item: dict[str, Any]) -> str:
    return json.dumps(item)


def check_pairs(given: list[Any]) -> None:
    """Every output has its call before it; every reasoning item is followed by its call."""
    seen: set[str] = set()
    for index, item in enumerate(given):
        if item.get("type") == "function_call":
            seen.add(item["call_id"])
        if item.get("type") == "function_call_output":
            assert item["call_id"] in seen, f"output {item['call_id']} without its call"
        if item.get("type") == "reasoning":
            assert given[index + 1].get("type") == "function_call"


def test_history_is_chosen_newest_first_in_whole_groups_and_the_run_is_whole() -> None:
    run = [user("the question of this run"), reasoning("rn"), call("cn"), output("cn", "ok")]
    items = history(30) + run
    before = copy.deepcopy(items)
    fitted = fit(items, 40_000)
    assert items == before  # the session's and the run state's items are not changed
    assert fitted.size <= 40_000 and sum(item_size(i) for i in fitted.input) <= 40_000
    assert fitted.input[-4:] == run
    check_pairs(fitted.input)
    # What is given of the history is its newest part, in order; the rest is counted.
    given = [i for i in fitted.input[1:-4]]
    assert given and given[-1] == items[len(items) - 5]
    assert fitted.input[0] == {
        "type": "message",
        "role": "developer",
        "content": f"[{fitted.left_out} earlier messages of this thread left out]",
    }
    assert fitted.left_out == len(items) - len(run) - len(given)
    assert fit(items, 40_000) == fitted  # a pure function: the same request every time


def test_a_huge_tool_output_is_cut_head_and_tail_with_a_line_saying_so() -> None:
    log = "BEGIN-OF-LOG " + "line of the log\n" * 25_000 + " END-OF-LOG"
    items = [user("read the log"), call("c1", "read_log"), output("c1", log)]
    fitted = fit(items, 40_000)
    cut = fitted.input[-1]["output"]
    assert cut.startswith("BEGIN-OF-LOG ") and cut.endswith(" END-OF-LOG")
    omitted = len(log) - len(cut.split("\n[…")[0]) - len(cut.rsplit("left out]\n", 1)[1])
    assert f"[… {omitted:,} characters of this tool's output left out]" in cut
    assert item_size(fitted.input[-1]) <= 40_000 // 4 + 100  # its share of the room
    assert fitted.cut == 1 and fitted.left_out == 0 and len(log) > 390_000
    assert items[-1]["output"] is log  # the item itself is untouched


def test_older_tool_outputs_are_cut_down_before_turns_are_left_out() -> None:
    items = [*history(4, size=1_500), user("now")]
    whole = sum(item_size(i) for i in items)
    fitted = fit(items, whole - 2_000)
    assert fitted.left_out == 0  # every turn is still there...
    outputs = [i["output"] for i in fitted.input if i.get("type") == "function_call_output"]
    assert "characters of this tool's output left out" in outputs[0]  # ...the oldest cut
    users = [i for i in items if i.get("role") == "user"]
    assert [i for i in fitted.input if i.get("role") == "user"] == users  # messages whole


def test_the_summary_comes_first_and_a_second_fit_counts_on() -> None:
    items = [*history(10), user("latest")]
    first = fit(items, 30_000, summary="They looked up ten things.", left_out=7)
    assert first.input[0]["content"].endswith("They looked up ten things.")
    assert (
        first.input[1]["content"] == f"[{first.left_out} earlier messages of this thread left out]"
    )
    assert first.left_out > 7
    # A retry into half the room keeps the summary and counts what it leaves out too.
    second = fit(first.input, 15_000)
    assert second.input[0] == first.input[0]
    assert second.left_out > first.left_out
    assert (
        second.input[1]["content"]
        == f"[{second.left_out} earlier messages of this thread left out]"
    )
    assert second.input[-1] == user("latest")
    check_pairs(second.input)


def test_an_output_whose_call_is_gone_is_left_out_and_a_call_answered_in_the_run_stays() -> None:
    items = [output("gone", "orphan"), user("a"), answer("b"), call("open"), user("go on")]
    items.append(output("open", "closed in this run"))
    fitted = fit(items, 100_000)
    assert output("gone", "orphan") not in fitted.input and fitted.left_out == 1
    assert run_start(items) == 3  # the run reaches back to the call its output answers
    check_pairs(fitted.input)


def test_groups_keep_calls_with_their_outputs_and_reasoning_with_what_follows() -> None:
    items = [user("u"), reasoning("r"), call("a"), call("b"), output("a", "1"), output("b", "2")]
    items += [reasoning("r2"), answer("done")]
    assert groups(items) == [(0, 1), (1, 6), (6, 8)]


def test_what_cannot_fit_even_cut_down_is_too_large() -> None:
    run = [user("many calls")]
    for index in range(40):
        run += [call(f"c{index}"), output(f"c{index}", "z" * 5_000)]
    with pytest.raises(TooLarge):
        fit(run, 3_000)
    assert fit(run, 40_000).size <= 40_000  # the same run, cut to previews, fits more room


# -- what a fresh run is given of the history --------------------------------------------


def fresh_plan(
    items: list[Any],
    *,
    next_seq: int,
    summary_through: int = 0,
    fixed: int = 0,
    room: int = 100_000,
    limit: int = 60,
    summarize: bool = True,
) -> HistoryPlan:
    """`plan_history` from the thread's start (no floor): by default nothing summarized
    yet, nothing given besides the history, room to spare."""
    return plan_history(
        items,
        next_seq=next_seq,
        floor=0,
        summary_through=summary_through,
        fixed=fixed,
        room=room,
        limit=limit,
        summarize=summarize,
    )


def test_a_run_reads_everything_after_the_summary_while_it_fits() -> None:
    items = history(3, size=500)
    plan = fresh_plan(items, next_seq=100, summary_through=85)
    assert (plan.start, plan.fold, plan.left_out) == (85, None, 0)


def test_a_summary_is_asked_for_once_the_history_outgrows_the_room_then_not_again_soon() -> None:
    items = history(12)  # 60 items of ~8.3 KB a turn
    plan = fresh_plan(items, next_seq=60, fixed=5_000, room=60_000)
    assert plan.fold == (0, plan.start)
    assert plan.start in {start for start, _ in groups(items)}  # never inside a group
    kept = items[plan.start :]
    assert sum(item_size(i) for i in kept) <= (60_000 - 5_000) // 2
    # The next runs, a turn later each, find everything after the summary fits again.
    later = fresh_plan(
        items + history(1), next_seq=65, summary_through=plan.start, fixed=5_000, room=60_000
    )
    assert later.fold is None and later.start == plan.start


def test_items_beyond_the_read_are_summed_up_and_without_summaries_counted() -> None:
    items = history(2, size=10)  # 10 small items, read of the latest 10 of 40
    counted = fresh_plan(items, next_seq=40, limit=10, summarize=False)
    assert (counted.start, counted.fold, counted.left_out) == (30, None, 30)
    folded = fresh_plan(items, next_seq=40, limit=10)
    assert folded.fold == (0, folded.start) and folded.start >= 30


def test_the_transcript_for_a_summary_fits_its_room_and_names_what_it_leaves() -> None:
    items = history(20, size=3_000)
    text = transcript("Earlier: hello.", items, unread=3, room=20_000)
    assert len(text.encode()) <= 20_000 + 200
    assert text.startswith("Summary so far:\nEarlier: hello.")
    assert "earlier messages could not be included]" in text
    assert "assistant called lookup({})" in text and "the tool returned: o19" in text


# -- sizes and budgets ----------------------------------------------------------------


def test_the_estimate_is_never_below_the_json_and_counts_bytes() -> None:
    for item in [*history(2), user("é" * 1000), user("漢字" * 1000)]:
        assert item_size(item) >= len(json.dumps(item, ensure_ascii=False, separators=(",", ":")))
    assert item_size(user("漢字" * 1000)) >= 6_000  # three bytes each: about a token each


def test_budgets_come_from_the_setting_then_the_sdks_table_then_a_careful_default() -> None:
    assert known_window("gpt-4o") == 128_000 and known_window("openai/gpt-4.1-mini") == 1_047_576
    assert known_window("gpt-4o-2099-01-01") == 128_000  # a dated variant
    assert known_window("gpt-scripted") is None
    assert Budget.for_model("gpt-4o", None).window == 128_000
    assert Budget.for_model("gpt-scripted", None).window == 32_000
    assert Budget.for_model("gpt-4o", 20_000).window == 20_000
    budget = Budget.for_model("x", 30_000)
    assert budget.input_bytes == 20_000 * 3  # a third left for the answer
    assert budget.room("i" * 1_000, 500) == 60_000 - 1_500
    assert budget.halved().window == 15_000
    # A run's model: BOT_MODEL, else the agent's (a name; a model object without one is
    # of unknown window), else the SDK's default.
    window = ContextWindow(RuntimeSettings())
    assert window.budget_of(Agent(name="a", model="gpt-4o")).window == 128_000
    assert window.budget_of(Agent(name="a", model=ScriptedModel([]))).window == 32_000
    assert window.budget_of(Agent(name="a")).window == known_window(get_default_model())
    configured = ContextWindow(RuntimeSettings(model="gpt-4o-mini", context_tokens=9_000))
    assert configured.budget_of(Agent(name="a", model="gpt-4.1")).window == 9_000


# -- refusals -----------------------------------------------------------------------------


def api_error(status: int, body: dict[str, Any]) -> openai.APIStatusError:
    request = httpx2.Request("POST", "https://api.openai.com/v1/responses")
    response = httpx2.Response(status, request=request, json={"error": body})
    kind = {400: openai.BadRequestError, 429: openai.RateLimitError}.get(
        status, openai.InternalServerError
    )
    return kind(body["message"], response=response, body=body)


def test_a_too_large_refusal_is_told_apart() -> None:
    too_large = api_error(
        400,
        {
            "message": "Your input exceeds the context window of this model.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        },
    )
    assert is_context_refusal(too_large) and is_permanent_refusal(too_large)

    class ContextWindowExceededError(Exception):  # LiteLLM's, by name
        pass

    assert is_context_refusal(ContextWindowExceededError("litellm.ContextWindowExceeded"))
    anthropic = api_error(
        400,
        {
            "message": "prompt is too long: 210000 tokens > 200000 maximum",
            "type": "invalid_request_error",
        },
    )
    assert is_context_refusal(anthropic)
    wrapped = RuntimeError("the turn failed")
    wrapped.__cause__ = too_large
    assert is_context_refusal(wrapped)

    other = api_error(
        400,
        {
            "message": "No tool call found for function call output with call_id c1.",
            "type": "invalid_request_error",
            "code": None,
        },
    )
    assert not is_context_refusal(other) and is_permanent_refusal(other)
    assert "send a message or use /resume" not in what_to_do(other)
    for transient in (api_error(429, {"message": "slow down"}), TimeoutError()):
        assert not is_context_refusal(transient) and not is_permanent_refusal(transient)
        assert "send a message or use /resume" in what_to_do(transient)
