"""MCP servers of a real bot process (`python -m bot serve`, `testkit.mcp_agent`, a stdio
server): connected before the bot reports healthy; its `require_approval` is our card; the
bot killed right after the tool's side effect never runs it again and says its outcome is
unknown, and so does a call that answers after the MCP client's read timeout; a SIGKILLed
bot's server exits (its stdin closes) and a SIGTERMed bot's server is
stopped (no orphan); a server that is down at start pauses the run that needs it, which
continues by itself once the server is back."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from storage import Status, ToolCallStatus
from testkit.deployment import Deployment, deployment, finished, record
from testkit.responses import ScriptedResponses, answered_call, calls_made, message, tool_call
from testkit.runtime import SideEffects
from testkit.services import wait_until
from testkit.slack import CHANNEL
from tests.conftest import Backend

pytestmark = pytest.mark.slow
AGENT = "testkit.mcp_agent:build_agent"


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (an exited child not yet reaped)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    state = next(line for line in status.splitlines() if line.startswith("State:"))
    return "zombie" not in state


def server_pids(tmp_path: Path) -> list[int]:
    path = tmp_path / "mcp-pids"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def mcp_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "BOT_AGENT": AGENT,
        "MCP_EFFECTS_FILE": str(tmp_path / "mcp-effects.jsonl"),
        "MCP_PIDS_FILE": str(tmp_path / "mcp-pids"),
        **extra,
    }


async def replies_with(bot: Deployment, ts: str, text: str) -> list[str]:
    found = await bot.api.wait_for(
        lambda: [r.text for r in bot.api.bot_replies(CHANNEL, ts) if text in r.text], within=60
    )
    return list(found)


async def test_an_approved_mcp_call_killed_after_its_effect_runs_once(
    backend: Backend, tmp_path: Path
) -> None:
    effects = SideEffects(tmp_path / "mcp-effects.jsonl")
    script = ScriptedResponses(
        [
            [tool_call("pay", {"amount": 5, "to": "bob"}, "call-pay")],
            [message("I could not confirm the payment to bob.")],
        ]
    )
    env = mcp_env(tmp_path, MCP_PAY_SECONDS="30")  # the bot dies while `pay` answers
    async with deployment(backend, tmp_path, script, **env) as bot:
        await bot.start()
        [first] = server_pids(tmp_path)  # connected before the bot reported healthy
        question = await bot.mention("UALICE", "pay bob 5")
        [card] = await bot.api.wait_for(lambda: bot.api.bot_replies(CHANNEL, question.ts))
        assert card.blocks and "pay" in card.text
        assert await bot.click_approve(card, "UALICE") == 200
        await asyncio.to_thread(wait_until, lambda: effects.calls("pay"), 30)
        assert await bot.signal(signal.SIGKILL) == -signal.SIGKILL
        await asyncio.to_thread(wait_until, lambda: not alive(first), 10)  # its stdin closed
        await bot.start()
        await replies_with(bot, question.ts, "could not confirm")
        unknown = await replies_with(bot, question.ts, "outcome is unknown")
        await finished(bot, question)
        second = server_pids(tmp_path)[-1]
        assert second != first and alive(second)
        assert await bot.signal(signal.SIGTERM) == 0
        assert not alive(second)  # stopped with the bot: no orphan
    assert [(e["amount"], e["to"]) for e in effects.calls("pay")] == [(5, "bob")]
    assert "`pay` (call call-pay)" in unknown[0]


async def test_an_approved_mcp_call_that_answers_too_late_is_not_paid_twice(
    backend: Backend, tmp_path: Path
) -> None:
    """Issue 49: `pay` has had its effect and answers after the client's read timeout (1 s
    here; the SDK's default is 5 s). That is not an answer: the model is told the outcome
    is unknown (not "An error occurred ... Please try again.", upon which a model pays
    again and the person approves again), the call stays `started`, and the thread says
    so. The model below pays again only when told to try again."""
    effects = SideEffects(tmp_path / "mcp-effects.jsonl")

    def model(request: dict[str, Any]) -> list[dict[str, Any]]:
        answered = answered_call(request)
        if answered and "try again" in answered[1] and calls_made(request, "pay") < 2:
            return [tool_call("pay", {"amount": 5, "to": "bob"}, "call-pay-2")]
        return [message(f"pay said: {answered[1] if answered else ''}")]

    script = ScriptedResponses(
        [[tool_call("pay", {"amount": 5, "to": "bob"}, "call-pay-1")]], respond=model
    )
    env = mcp_env(tmp_path, MCP_PAY_SECONDS="4", MCP_TIMEOUT="1")
    async with deployment(backend, tmp_path, script, **env) as bot:
        await bot.start()
        question = await bot.mention("UALICE", "pay bob 5")
        [card] = await bot.api.wait_for(lambda: bot.api.bot_replies(CHANNEL, question.ts))
        assert await bot.click_approve(card, "UALICE") == 200

        def asked() -> int:  # approval cards, open or decided
            texts = [m.text for m in bot.api.bot_replies(CHANNEL, question.ts)]
            return sum("Approval needed" in text or "approved by" in text for text in texts)

        def said() -> list[str]:
            return [
                m.text for m in bot.api.bot_replies(CHANNEL, question.ts) if "pay said" in m.text
            ]

        await bot.api.wait_for(lambda: asked() > 1 or said(), within=60)
        assert asked() == 1  # not asked to approve it again
        await finished(bot, question)
        replies = [m.text for m in bot.api.bot_replies(CHANNEL, question.ts)]
        call = bot.store.get_tool_call(record(bot, question).key, "call-pay-1")
    [answer] = said()
    assert "outcome of this call is unknown" in answer and "try again" not in answer
    assert any(
        "`pay` (call call-pay-1) was sent to the `payments` tools, which did not answer in time"
        in reply
        for reply in replies
    ), replies
    assert call is not None and call.status is ToolCallStatus.STARTED
    assert [(e["amount"], e["to"]) for e in effects.calls("pay")] == [(5, "bob")]


async def test_a_server_down_at_start_pauses_the_run_until_it_is_back(
    backend: Backend, tmp_path: Path
) -> None:
    effects = SideEffects(tmp_path / "mcp-effects.jsonl")
    down = tmp_path / "mcp-down"
    down.touch()
    script = ScriptedResponses(
        [[tool_call("balance", {"account": "bob"}, "call-balance")], [message("Bob has 100.")]]
    )
    async with deployment(
        backend, tmp_path, script, **mcp_env(tmp_path, MCP_FAIL_WHILE=str(down))
    ) as bot:
        await bot.start()  # healthy all the same: messages are kept
        async with aiohttp.ClientSession() as http, http.get(f"{bot.url}/healthz") as health:
            assert await health.json() == {"ok": True, "mcp_down": ["payments"]}
        question = await bot.mention("UALICE", "what is bob's balance?")
        [notice] = await replies_with(bot, question.ts, "tools are unavailable")
        assert "`payments`" in notice and "continue when they are back" in notice
        await asyncio.to_thread(
            wait_until, lambda: record(bot, question).status is Status.INTERRUPTED, 30
        )
        assert script.requests == [] and effects.calls() == []
        down.unlink()  # the server starts now: the bot reconnects it and continues
        await replies_with(bot, question.ts, "Bob has 100.")
        await finished(bot, question)
    assert [e["tool"] for e in effects.calls()] == ["balance"]
    assert [r.text for r in bot.api.bot_replies(CHANNEL, question.ts)][-1] == "Bob has 100."
