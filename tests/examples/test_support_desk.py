"""examples.support_desk on its offline model, through the runtime (local backend): a
retry-safe lookup and an agent used as a tool answer at once; a refund is handed off to
billing, approved by a person above the limit (after a restart: a new runtime decides from
the checkpoint), and records who asked and who approved; a small one runs without a
person; a card number stops the request before any model sees it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agents.testing import ScriptedModel

from bot.runtime import (
    Answer,
    ApprovalRequest,
    ConversationRuntime,
    Notice,
    NoticeKind,
    agent_fingerprint,
)
from bot.settings import RuntimeSettings
from examples import support_desk
from storage.local import LocalStore
from testkit.runtime import KEY, decide

SETTINGS = RuntimeSettings(approvers=frozenset({"U2"}))


def answers(outcomes: list[Any]) -> list[str]:
    return [o.text for o in outcomes if isinstance(o, Answer)]


def refunds(files: Path) -> list[dict[str, Any]]:
    path = files / "refunds.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_lookups_and_the_policy_agent_answer_without_a_pause(
    local_store: LocalStore, offline: Path
) -> None:
    rt = ConversationRuntime(local_store, support_desk.build_agent(), SETTINGS)
    first = await rt.handle_message(KEY, event_id="E1", user="U1", text="where is order 1042?")
    assert answers(first) == [f"Order 1042 is {support_desk.ORDERS['1042']}."]
    second = await rt.handle_message(
        KEY, event_id="E2", user="U1", text="can I return an opened item?"
    )
    assert answers(second) == [support_desk.POLICY]  # the nested agent's answer
    assert not [o for o in first + second if isinstance(o, ApprovalRequest)]


async def test_a_large_refund_is_handed_to_billing_and_approved_once(
    local_store: LocalStore, offline: Path
) -> None:
    rt = ConversationRuntime(local_store, support_desk.build_agent(), SETTINGS)
    asked = "refund 80 EUR on order 1042, it arrived broken"
    [request] = [
        o
        for o in await rt.handle_message(KEY, event_id="E1", user="U1", text=asked)
        if isinstance(o, ApprovalRequest)
    ]
    [call] = request.calls
    assert call.tool_name == "refund" and json.loads(call.arguments)["amount"] == 80
    assert request.approvers == ["U2"] and refunds(offline) == []
    # A restart: a new runtime (a new agent graph) decides it from the checkpoint alone.
    again = ConversationRuntime(local_store, support_desk.build_agent(), SETTINGS)
    done = await decide(again, request, call.call_id, user="U2")
    assert answers(done) == ["Done: Refunded 80.00 EUR on order 1042 (refund 1)."]
    [refund] = refunds(offline)
    assert (refund["requested_by"], refund["approved_by"]) == ("U1", "U2")
    assert refund["call_id"] == call.call_id and refund["thread"] == str(KEY)


async def test_a_small_refund_needs_no_person(local_store: LocalStore, offline: Path) -> None:
    rt = ConversationRuntime(local_store, support_desk.build_agent(), SETTINGS)
    outcomes = await rt.handle_message(
        KEY, event_id="E1", user="U1", text="please refund 30 EUR on order 1044"
    )
    assert not [o for o in outcomes if isinstance(o, ApprovalRequest)]
    assert answers(outcomes) == ["Done: Refunded 30.00 EUR on order 1044 (refund 1)."]
    [refund] = refunds(offline)
    assert refund["approved_by"] is None  # the ledger still ran it at most once
    assert local_store.get_tool_call(KEY, refund["call_id"]) is not None


async def test_a_card_number_stops_the_request_before_any_model(
    local_store: LocalStore, offline: Path
) -> None:
    agent = support_desk.build_agent()
    rt = ConversationRuntime(local_store, agent, SETTINGS)
    outcomes = await rt.handle_message(
        KEY, event_id="E1", user="U1", text="refund me, my card is 4111 1111 1111 1111"
    )
    [notice] = [o for o in outcomes if isinstance(o, Notice)]
    assert notice.kind is NoticeKind.GUARDRAIL and "`no_card_numbers`" in notice.text
    assert isinstance(agent.model, ScriptedModel) and agent.model.calls == ()
    assert answers(outcomes) == [] and refunds(offline) == []


def test_a_new_instructions_version_is_a_new_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    before = agent_fingerprint(support_desk.build_agent())
    assert agent_fingerprint(support_desk.build_agent()) == before
    monkeypatch.setattr(support_desk.triage_instructions, "version", "2")
    assert agent_fingerprint(support_desk.build_agent()) != before
