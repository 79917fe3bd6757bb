"""examples.mcp_helpdesk through the runtime (local backend), on the bot's offline model with
its real stdio MCP server: a read-only lookup answers at once, its MCP content shown as text;
a keyed ticket is opened with the call's idempotency key in its argument, and once when the
call is cut short and sent again; closing one waits for a person's approval."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bot.runtime import (
    Answer,
    ApprovalRequest,
    ConversationRuntime,
    Notice,
    NoticeKind,
    RequestContext,
)
from bot.settings import RuntimeSettings
from examples import mcp_helpdesk
from storage.local import LocalStore
from testkit.runtime import KEY, decide, running
from testkit.services import wait_until

SETTINGS = RuntimeSettings(approvers=frozenset({"U2"}))


@pytest.fixture
def helpdesk(offline: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HELPDESK_SECONDS", "0")
    return offline / "helpdesk.jsonl"


def answers(outcomes: list[Any]) -> list[str]:
    return [o.text for o in outcomes if isinstance(o, Answer)]


def tickets(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_find_open_and_close_tickets(local_store: LocalStore, helpdesk: Path) -> None:
    async with running(
        ConversationRuntime(local_store, mcp_helpdesk.build_agent(), SETTINGS)
    ) as rt:
        found = await rt.handle_message(KEY, event_id="E1", user="U1", text="find_tickets printer")
        assert answers(found) == ["(offline model) `find_tickets`: No ticket mentions 'printer'."]

        opened = await rt.handle_message(
            KEY, event_id="E2", user="U1", text='open_ticket title="printer jammed"'
        )
        assert answers(opened) == [
            "(offline model) `open_ticket`: Ticket #1 is open: printer jammed."
        ]
        [ticket] = tickets(helpdesk)
        context = RequestContext(
            team=KEY.team, channel=KEY.channel, thread_ts=KEY.thread_ts, user="U1"
        )
        assert ticket["key"].startswith("sb-") and len(ticket["key"]) == 27  # the call's key
        assert ticket["key"] != context.idempotency_key("another call")

        listed = await rt.handle_message(KEY, event_id="E3", user="U1", text="find_tickets jammed")
        assert answers(listed) == ["(offline model) `find_tickets`: #1 printer jammed (open)"]

        asked = await rt.handle_message(
            KEY, event_id="E4", user="U1", text="close_ticket ticket_id=1 reason=fixed"
        )
        [request] = [o for o in asked if isinstance(o, ApprovalRequest)]
        assert [call.tool_name for call in request.calls] == ["close_ticket"]
        assert json.loads(request.calls[0].arguments) == {"ticket_id": 1, "reason": "fixed"}
        assert tickets(helpdesk)[-1]["status"] == "open"  # nothing ran before the decision
        done = await decide(rt, request, request.calls[0].call_id, user="U2")
        assert answers(done) == ["(offline model) `close_ticket`: Ticket #1 is closed: fixed."]


async def test_a_ticket_cut_short_is_opened_once(
    local_store: LocalStore, helpdesk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service wrote the ticket, then the bot died before its answer: the next bot sends
    the call again with the same key, and the service answers with the first ticket."""
    monkeypatch.setenv("HELPDESK_SECONDS", "60")
    first = ConversationRuntime(local_store, mcp_helpdesk.build_agent(), SETTINGS)
    serving = asyncio.create_task(
        first.handle_message(KEY, event_id="E1", user="U1", text="open_ticket title=toner")
    )
    await asyncio.to_thread(wait_until, lambda: tickets(helpdesk), 60)
    serving.cancel()  # the process dies while the service holds the call
    await asyncio.gather(serving, return_exceptions=True)
    await first.close()
    monkeypatch.setenv("HELPDESK_SECONDS", "0")
    async with running(
        ConversationRuntime(local_store, mcp_helpdesk.build_agent(), SETTINGS)
    ) as rt:
        outcomes = await rt.recover()
    assert len(tickets(helpdesk)) == 1
    assert answers(outcomes) == [
        "(offline model) `open_ticket`: Ticket #1 is open: toner (the service had it already)."
    ]
    assert NoticeKind.TOOL_COMPLETED_AFTER_RESTART in [
        o.kind for o in outcomes if isinstance(o, Notice)
    ]
