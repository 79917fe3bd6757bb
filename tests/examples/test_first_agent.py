"""Any agent runs offline: the README's first agent of one's own (`examples.first_agent`, no
model of its own) on `BOT_MODEL=offline`, with no key, through the runtime: the offline model
calls its tools by name, asks for the approval its tool needs and answers from the tools'
outputs. Without the offline model and without a key, the start names what is missing, and a
run says so plainly instead of "the model service failed"."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bot.agent_api import runs_offline
from bot.model_choice import missing_key_text
from bot.runtime import (
    Answer,
    ApprovalRequest,
    ConversationRuntime,
    Notice,
    NoticeKind,
    needs_openai_key,
)
from bot.settings import RuntimeSettings
from examples import first_agent, support_desk
from storage.local import LocalStore
from testkit.runtime import KEY, decide
from testkit.services import ROOT

OFFLINE = RuntimeSettings(model="offline", approvers=frozenset({"U2"}))


@pytest.fixture(autouse=True)
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "BOT_DEMO_MODEL", "BOT_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BOT_DEMO_DELAY", "0")
    monkeypatch.setenv("BOT_DEMO_WORD_DELAY", "0")


def answers(outcomes: list[Any]) -> list[str]:
    return [o.text for o in outcomes if isinstance(o, Answer)]


async def test_an_agent_without_a_model_runs_on_the_offline_model(
    local_store: LocalStore,
) -> None:
    rt = ConversationRuntime(local_store, first_agent.build_agent(), OFFLINE)
    looked = await rt.handle_message(KEY, event_id="E1", user="U1", text="lookup tides")
    assert answers(looked) == ["(offline model) `lookup`: Notes on tides: ask Dana, she knows."]

    asked = await rt.handle_message(
        KEY, event_id="E2", user="U1", text='send email to=bob@example.com body="see you at 3"'
    )
    [request] = [o for o in asked if isinstance(o, ApprovalRequest)]
    [call] = request.calls
    assert call.tool_name == "send_email"
    assert json.loads(call.arguments) == {"to": "bob@example.com", "body": "see you at 3"}
    done = await decide(rt, request, call.call_id, user="U2")
    assert answers(done) == ["(offline model) `send_email`: Sent to bob@example.com: see you at 3"]

    helped = await rt.handle_message(KEY, event_id="E3", user="U1", text="what can you do?")
    [said] = answers(helped)
    assert "`lookup`: Look a topic up (read-only)." in said and "`send_email`" in said
    assert "For example: `lookup topic=…`." in said


async def test_a_rejected_call_is_answered_as_not_done(local_store: LocalStore) -> None:
    rt = ConversationRuntime(local_store, first_agent.build_agent(), OFFLINE)
    asked = await rt.handle_message(KEY, event_id="E1", user="U1", text="send_email to=al body=hi")
    [request] = [o for o in asked if isinstance(o, ApprovalRequest)]
    done = await decide(rt, request, request.calls[0].call_id, approve=False)
    [said] = answers(done)
    assert said.startswith("(offline model) I did not run `send_email`")


async def test_without_a_key_a_run_says_the_key_is_missing(local_store: LocalStore) -> None:
    rt = ConversationRuntime(local_store, first_agent.build_agent(), RuntimeSettings())
    outcomes = await rt.handle_message(KEY, event_id="E1", user="U1", text="lookup tides")
    [notice] = [o for o in outcomes if isinstance(o, Notice)]
    assert notice.kind is NoticeKind.RUN_FAILED
    assert "the model service needs a key, and none is set (OPENAI_API_KEY)" in notice.text
    assert "the model service failed" not in notice.text


def test_the_start_names_the_agents_that_need_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = first_agent.build_agent()
    assert needs_openai_key(agent, RuntimeSettings()) == ["assistant"]
    assert needs_openai_key(agent, OFFLINE) == []
    assert needs_openai_key(agent, RuntimeSettings(), {"OPENAI_API_KEY": "sk-x"}) == []
    text = missing_key_text(["assistant"])
    assert "OPENAI_API_KEY is not set" in text and "BOT_MODEL=offline" in text
    # An agent that brings its own offline model needs no key while the bot runs offline.
    monkeypatch.setenv("BOT_DEMO_MODEL", "1")
    assert runs_offline()
    assert needs_openai_key(support_desk.build_agent(), RuntimeSettings()) == []
    # BOT_MODEL names every agent's model: each of them needs the key.
    named = needs_openai_key(support_desk.build_agent(), RuntimeSettings(model="gpt-5"))
    assert set(named) == {"triage", "billing", "policy"}


def test_the_readme_shows_this_agent_as_it_is() -> None:
    """The agent of one's own in the README and the docs is this file, as it is."""
    source = Path(first_agent.__file__).read_text()
    code = source[source.index("from agents import") :].strip()
    for doc in ("README.md", "docs/agents.md", "docs/first-agent.md"):
        blocks = re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(), re.DOTALL)
        assert any(code in block for block in blocks), doc


async def test_the_offline_model_hands_off_by_the_agents_name(local_store: LocalStore) -> None:
    """`billing refund order_id=1042` from triage: a handoff to billing, whose offline model
    then calls its own tool on the same message (and does not hand back)."""
    from agents import Agent, function_tool, handoff

    @function_tool
    def refund(order_id: str) -> str:
        """Refund an order."""
        return f"Refunded order {order_id}."

    billing = Agent(name="billing", tools=[refund], handoff_description="Refunds.")
    triage = Agent(name="triage", handoffs=[handoff(billing)])
    billing.handoffs = [triage]
    rt = ConversationRuntime(local_store, triage, OFFLINE)
    outcomes = await rt.handle_message(
        KEY, event_id="E1", user="U1", text="billing: refund order_id=1042"
    )
    assert answers(outcomes) == ["(offline model) `refund`: Refunded order 1042."]
