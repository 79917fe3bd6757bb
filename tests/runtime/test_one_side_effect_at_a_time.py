"""Side effects the model asks for together run one at a time (issue 48), on both backends:
calls marked `retry_safe` still run together, and a stop that comes while the first runs
keeps the second from starting (the ledger: cancelled; the notice: stopped before it ran).
Crashes between and during them are shown with real processes in
`tests/slackapp/test_parallel_side_effects.py`."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from bot.runtime import ApprovalRequest, ConversationRuntime, Notice, NoticeKind, retry_safe
from storage import ToolCallStatus
from testkit.runtime import KEY, SideEffects, decide
from tests.conftest import Backend

OVERLAP_WAIT = 3.0  # seconds a side effect gives another to start beside it (none should)


class Overlaps:
    """Which tools ran while another side effect was running."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.changed = asyncio.Event()
        self.seen_together: set[frozenset[str]] = set()

    async def side_effect(self, name: str) -> None:
        self.running.add(name)
        self._note()
        try:
            # Give any other side effect a chance to start meanwhile (it must not).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._another(name), OVERLAP_WAIT)
        finally:
            self.running.discard(name)

    async def _another(self, name: str) -> None:
        while self.running == {name}:
            self.changed.clear()
            await self.changed.wait()

    def _note(self) -> None:
        if len(self.running) > 1:
            self.seen_together.add(frozenset(self.running))
        self.changed.set()


def tools(effects: SideEffects, overlaps: Overlaps, *, approval: bool) -> list[Any]:
    lookups_met = asyncio.Barrier(2)

    @function_tool(needs_approval=approval)
    async def file_ticket(title: str) -> str:
        """File a ticket (a side effect)."""
        effects.record("file_ticket", {"title": title})
        await overlaps.side_effect("file_ticket")
        return f"filed {title}"

    @function_tool(needs_approval=approval)
    async def send_email(to: str) -> str:
        """Send an email (a side effect)."""
        effects.record("send_email", {"to": to})
        await overlaps.side_effect("send_email")
        return f"sent to {to}"

    @function_tool
    async def lookup(topic: str) -> str:
        """Look a topic up (read-only): the two lookups wait for each other."""
        await asyncio.wait_for(lookups_met.wait(), 30)
        return f"notes on {topic}"

    return [file_ticket, send_email, retry_safe(lookup)]


def asked_together() -> ScriptedModel:
    return ScriptedModel(
        [
            [
                function_call("file_ticket", {"title": "printer"}, call_id="c-ticket"),
                function_call("send_email", {"to": "ana@example.com"}, call_id="c-email"),
                function_call("lookup", {"topic": "printers"}, call_id="c-look-1"),
                function_call("lookup", {"topic": "toner"}, call_id="c-look-2"),
            ],
            [assistant_message("Filed and sent.")],
        ]
    )


async def test_side_effects_asked_together_run_one_at_a_time(
    backend: Backend, effects: SideEffects
) -> None:
    """Two side effects and two retry-safe lookups in one model response: each side effect
    runs alone (the other starts after it is recorded), the lookups run together (each
    waits for the other), and every call runs once."""
    overlaps = Overlaps()
    agent = Agent(
        name="assistant",
        model=asked_together(),
        tools=tools(effects, overlaps, approval=False),
    )
    runtime = ConversationRuntime(backend.open(), agent)
    outcomes = await runtime.handle_message(KEY, event_id="E1", user="U1", text="go")
    assert [getattr(o, "text", None) for o in outcomes][-1] == "Filed and sent."
    assert overlaps.seen_together == set()
    assert sorted(row["tool"] for row in effects.calls()) == ["file_ticket", "send_email"]
    store = backend.open()
    for call_id in ("c-ticket", "c-email"):
        call = store.get_tool_call(KEY, call_id)
        assert call is not None and call.status is ToolCallStatus.COMPLETED
    assert store.get_tool_call(KEY, "c-look-1") is None  # retry-safe: no ledger


async def test_a_stop_while_the_first_runs_keeps_the_second_from_starting(
    backend: Backend, effects: SideEffects
) -> None:
    """Both side effects approved; a stop comes while the first runs: the first finishes
    and is recorded, the second never starts (the ledger: cancelled), and the notice says
    which ran and which did not."""
    release = asyncio.Event()
    first_running = asyncio.Event()

    @function_tool(needs_approval=True)
    async def file_ticket(title: str) -> str:
        """File a ticket (a side effect)."""
        effects.record("file_ticket", {"title": title})
        first_running.set()
        await release.wait()
        return f"filed {title}"

    @function_tool(needs_approval=True)
    def send_email(to: str) -> str:
        """Send an email (a side effect)."""
        effects.record("send_email", {"to": to})
        return f"sent to {to}"

    model = ScriptedModel(
        [
            [
                function_call("file_ticket", {"title": "printer"}, call_id="c-ticket"),
                function_call("send_email", {"to": "ana@example.com"}, call_id="c-email"),
            ],
            [assistant_message("(never: stopped first)")],
        ]
    )
    sent: list[Any] = []

    async def sink(outcome: Any, *_: Any) -> None:
        sent.append(outcome)

    agent = Agent(name="assistant", model=model, tools=[file_ticket, send_email])
    runtime = ConversationRuntime(backend.open(), agent, on_outcome=sink)
    [request] = await runtime.handle_message(KEY, event_id="E1", user="U1", text="go")
    assert isinstance(request, ApprovalRequest) and len(request.calls) == 2
    await decide(runtime, request, "c-ticket")
    running = asyncio.create_task(decide(runtime, request, "c-email"))
    await asyncio.wait_for(first_running.wait(), 30)
    assert (await runtime.request_stop(KEY, "U1")).accepted
    release.set()
    await asyncio.wait_for(running, 30)
    assert [row["tool"] for row in effects.calls()] == ["file_ticket"]
    store = backend.open()
    ticket, email = store.get_tool_call(KEY, "c-ticket"), store.get_tool_call(KEY, "c-email")
    assert ticket is not None and ticket.status is ToolCallStatus.COMPLETED
    assert email is not None and email.status is ToolCallStatus.CANCELLED
    [notice] = [o for o in sent if isinstance(o, Notice) and o.kind is NoticeKind.STOPPED]
    assert "Already done (it ran once and is not repeated): `file_ticket`." in notice.text
    assert "Stopped before it ran (not run): `send_email`." in notice.text
    assert "unknown" not in notice.text
