"""Operators' agents (issue 25) served by real `python -m bot serve` processes: a side effect
behind a `handoff()` object, killed right after it happened; an approval inside an agent used
as a tool, decided after a restart; a guardrail's trip; a tool kind the bot cannot guard,
refused at load. Signed requests, the recording Slack stand-in, the real OpenAI model class
against a scripted /v1/responses server that answers each agent from what it is sent."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from bot.permalink import permalink
from bot.standin.slack_api import Message
from storage import ToolCallStatus
from testkit.operator_agents import NO_SECRETS
from testkit.responses import ScriptedResponses, answered_call, message, tool_call, user_text
from testkit.served import ServedBot, served_bot
from testkit.services import wait_until
from testkit.slack import CHANNEL
from tests.conftest import Backend

pytestmark = pytest.mark.slow
ALICE = "UALICE"
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (INFO|DEBUG) ")


def desk_model(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The model behind every agent of `front_desk`, told apart by their instructions:
    `front` hands "pay" off to payments and asks the clerk to "refund"; each specialist
    calls its tool, then answers with what the tool returned."""
    instructions = str(request.get("instructions") or "")
    answered = answered_call(request)
    if "front:" in instructions:
        if answered is not None and answered[0] == "ask_clerk":
            return [message(f"front: {answered[1]}")]
        text = user_text(request)
        if "pay" in text:
            return [tool_call("transfer_to_payments", {}, "call-handoff")]
        if "refund" in text:
            return [tool_call("ask_clerk", {"input": text}, "call-clerk")]
        return [message("front: how can I help?")]
    specialist, tool, arguments = (
        ("payments", "transfer", {"amount": 5, "to": "bob"})
        if "payments:" in instructions
        else ("clerk", "refund", {"amount": 7, "to": "ann"})
    )
    if answered is not None and answered[0] == tool:
        return [message(f"{specialist}: {answered[1]}")]
    return [tool_call(tool, arguments, f"call-{tool}")]


def hold(tmp_path: Path) -> Path:
    """The file a tool waits on after its effect while it exists (`held`)."""
    path = tmp_path / "hold"
    path.touch()
    return path


def effects(bot: ServedBot) -> list[dict[str, Any]]:
    path = Path(bot.env["EFFECTS_FILE"])
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines]


def texts(bot: ServedBot, question: Message) -> list[str]:
    return [reply.text for reply in bot.api.bot_replies(CHANNEL, question.ts)]


async def card_in(bot: ServedBot, question: Message) -> Message:
    cards: list[Message] = await bot.api.wait_for(
        lambda: [r for r in bot.api.bot_replies(CHANNEL, question.ts) if r.blocks]
    )
    [card] = cards
    return card


async def test_handoffs_agent_tools_and_guardrails_across_a_kill(
    backend: Backend, tmp_path: Path
) -> None:
    """One bot process (its desk's computer tool marked `retry_safe`, so it starts) serves
    three threads: a transfer behind a `handoff()` (approved, then the process is SIGKILLed
    right after the transfer happened), a refund inside an agent used as a tool (its card
    up), and a message a guardrail stops. After the restart the transfer is "outcome
    unknown", never run again; the refund is approved then, runs once, and the run answers;
    the guardrail's thread is finished, with nothing to resume."""
    script = ScriptedResponses([], respond=desk_model)
    async with served_bot(
        backend.env,
        backend.open(),
        tmp_path,
        script,
        agent="testkit.operator_agents:front_desk",
        EFFECTS_FILE=str(tmp_path / "effects.jsonl"),
        HOLD_FILE=str(hold(tmp_path)),
    ) as bot:
        people = bot.people
        await bot.start()
        paying = await people.mention(ALICE, "pay 5 to bob")
        refunding = await people.mention(ALICE, "refund 7 to ann")
        secret = await people.mention(ALICE, "my password is hunter2")
        transfer_card = await card_in(bot, paying)
        refund_card = await card_in(bot, refunding)
        assert "*Approval needed*: `transfer`" in json.dumps(transfer_card.blocks)
        # The nested agent's own tool, not the tool that runs that agent:
        assert "*Approval needed*: `refund`" in json.dumps(refund_card.blocks)

        # The guardrail: a plain notice naming it, a finished conversation.
        [notice] = await bot.api.wait_for(lambda: texts(bot, secret))
        assert notice.startswith(":shield:") and f"A check (`{NO_SECRETS}`)" in notice, notice
        assert "The run stopped" not in notice
        await bot.idle(people, secret.ts)
        link = permalink(people.key(secret.ts))
        _, token = await people.command("/resume", link, ALICE)
        [reply] = await people.responses_for(token)
        assert "nothing to resume" in reply["text"].lower(), reply

        # The transfer, approved: the process dies right after it happened.
        assert await people.click(transfer_card, "approval_approve", ALICE) == 200
        await asyncio.to_thread(wait_until, lambda: effects(bot), 30)
        assert await bot.signal(signal.SIGKILL) == -signal.SIGKILL

        await bot.start()
        unknown = await bot.api.wait_for(
            lambda: [t for t in texts(bot, paying) if t.startswith("payments:")], within=30
        )
        assert "outcome of this call is unknown" in unknown[0]
        transfer = bot.store.get_tool_call(people.key(paying.ts), "call-transfer")
        assert transfer is not None and transfer.status is ToolCallStatus.STARTED
        # The refund's card, decided after the restart.
        assert await people.click(refund_card, "approval_approve", ALICE) == 200
        await bot.api.wait_for(
            lambda: "front: clerk: refunded 7 to ann" in texts(bot, refunding), within=30
        )
        await bot.idle(people, paying.ts)
        await bot.idle(people, refunding.ts)
        assert texts(bot, secret) == [notice]  # nothing more was said there

    assert [(e["tool"], e["call_id"]) for e in effects(bot)] == [
        ("transfer", "call-transfer"),
        ("refund", "call-refund"),
    ]
    paid = texts(bot, paying)
    assert any(t.startswith(":grey_question:") and "`transfer`" in t for t in paid), paid
    assert not any("The run stopped" in t for t in paid + texts(bot, refunding))
    assert texts(bot, refunding)[-1] == "front: clerk: refunded 7 to ann"
    assert " WARNING openai.agents" not in bot.log.read_text()  # e.g. a context not restored


async def test_a_tool_the_bot_cannot_guard_is_refused_at_start(
    backend: Backend, tmp_path: Path
) -> None:
    """The desk with its computer tool not marked `retry_safe`: `python -m bot serve` exits
    at once with one line naming the agent and the tool, never having answered healthy.
    (Marked, the same desk serves: the test above.)"""
    async with served_bot(
        backend.env,
        backend.open(),
        tmp_path,
        ScriptedResponses([]),
        agent="testkit.operator_agents:front_desk_with_a_bare_computer",
    ) as bot:
        code, output, healthy = await bot.run_until_exit(within=60)
    assert (code, healthy) == (2, False), output
    *logged, line = output.strip().splitlines()
    assert all(LOG_LINE.match(entry) for entry in logged), logged  # (aws: boto3's INFO lines)
    assert line.startswith("configuration error: agent 'helper': tool "), line
    assert "(ComputerTool)" in line and "retry_safe" in line
