"""End to end over HTTP: the built-in agent, the real `OpenAIResponsesModel` and openai client
(configured only by OPENAI_API_KEY / OPENAI_BASE_URL / BOT_MODEL), a scripted /v1/responses
server, and durable storage; with a restart between the pause and the approval."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bot.agent_loader import load_agent
from bot.runtime import Answer, ConversationRuntime, Decided
from bot.settings import RuntimeSettings
from testkit.responses import ScriptedResponses, message, responses_server, tool_call
from testkit.runtime import KEY, asked, decide
from testkit.services import wait_until
from tests.conftest import Backend


async def test_demo_agent_over_http(
    backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BOT_DATA_DIR", str(tmp_path))  # where the demo files its tickets
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    monkeypatch.setenv("BOT_MODEL", "gpt-scripted")
    script = ScriptedResponses(
        [
            [tool_call("current_time", {"city": "Oslo"}, "call_time")],
            [tool_call("file_ticket", {"title": "Printer", "details": "jammed"}, "call_ticket")],
            [message("Filed the printer ticket.")],
        ]
    )
    with responses_server(script) as base_url:
        monkeypatch.setenv("OPENAI_BASE_URL", base_url)
        settings = RuntimeSettings()
        store = backend.open()
        first = ConversationRuntime(store, load_agent(settings.agent), settings)
        request = await asked(first, "What time is it in Oslo? Then file a ticket.", event_id="Ev1")
        assert [c.tool_name for c in request.calls] == ["file_ticket"]
        assert not (tmp_path / "tickets.jsonl").exists()

        # A new process (new store, new runtime) takes the decision.
        second = ConversationRuntime(backend.open(), load_agent(settings.agent), settings)
        outcomes = await decide(second, request, "call_ticket")
    assert [type(o) for o in outcomes] == [Decided, Answer]
    assert isinstance(outcomes[-1], Answer) and outcomes[-1].text == "Filed the printer ticket."
    tickets = (tmp_path / "tickets.jsonl").read_text().splitlines()
    assert [json.loads(t)["title"] for t in tickets] == ["Printer"]
    # The tool read who asked and who approved from the run context rebuilt on resume.
    assert {k: json.loads(tickets[0])[k] for k in ("requested_by", "approved_by")} == {
        "requested_by": "U1",
        "approved_by": "U1",
    }

    assert len(script.requests) == 3
    assert {r["model"] for r in script.requests} == {"gpt-scripted"}
    assert all(r["stream"] for r in script.requests)
    assert {h["authorization"] for h in script.headers} == {"Bearer sk-test-key"}
    last_input = script.requests[-1]["input"]
    outputs = {
        i["call_id"]: i["output"] for i in last_input if i.get("type") == "function_call_output"
    }
    assert outputs["call_ticket"] == "Filed ticket 'Printer'."
    assert "UTC" in outputs["call_time"]


async def test_transient_model_errors_are_retried_before_the_run_fails(
    backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three 503s in a row: more than the openai client's own retries would survive; the
    SDK's retry settings (`BOT_MODEL_RETRIES`, 3) do."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    monkeypatch.setenv("BOT_MODEL", "gpt-scripted")
    script = ScriptedResponses([[message("Fine after all.")]], failures=[503, 503, 503])
    with responses_server(script) as base_url:
        monkeypatch.setenv("OPENAI_BASE_URL", base_url)
        settings = RuntimeSettings(model_retry_delay=0.01)
        runtime = ConversationRuntime(backend.open(), load_agent(settings.agent), settings)
        outcomes = await runtime.handle_message(KEY, event_id="Ev1", user="U1", text="hi")
    assert [getattr(o, "text", None) for o in outcomes] == ["Fine after all."]
    assert script.failed == [503, 503, 503] and len(script.requests) == 1


async def test_a_429_holds_back_the_replicas_other_runs_once(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model service answers one run 429 (Retry-After: 1): that run retries after it,
    and a second run starting meanwhile waits at the replica's gate instead of meeting a
    429 of its own: one 429 for the replica, both answered."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    monkeypatch.setenv("BOT_MODEL", "gpt-scripted")
    script = ScriptedResponses([[message("First.")], [message("Second.")]], failures=[429])
    with responses_server(script) as base_url:
        monkeypatch.setenv("OPENAI_BASE_URL", base_url)
        settings = RuntimeSettings(model_retry_delay=0.01)
        runtime = ConversationRuntime(backend.open(), load_agent(settings.agent), settings)
        first = asyncio.create_task(
            runtime.handle_message(KEY, event_id="Ev1", user="U1", text="hi")
        )
        await asyncio.to_thread(wait_until, lambda: runtime.parts.rate_gate.closed_times, 30)
        other = KEY.model_copy(update={"thread_ts": "1700000200.000200"})
        second = await runtime.handle_message(other, event_id="Ev2", user="U2", text="hello")
        answers = [getattr(o, "text", None) for o in [*await first, *second]]
    assert sorted(a for a in answers if a) == ["First.", "Second."]
    assert script.failed == [429] and runtime.parts.rate_gate.closed_times == 1
    assert runtime.parts.rate_gate.waited == 1  # the second run waited at the gate
