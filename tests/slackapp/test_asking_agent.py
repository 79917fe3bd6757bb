"""An approval request names the agent that asks when it is not the bot's own: a handoff's
target, or an agent used as a tool (the nested agent whose tool it is, not the tool that
runs it). The thread's card, the Home tab's copy and the decided card say it; a request of
the bot's own agent names none. The real bolt app, signed requests, the Web API stand-in."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, function_tool, handoff
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.slackapp.blocks import APPROVE
from bot.standin.slack_api import Message
from storage import Status
from storage.local import LocalStore
from testkit.runtime import last_user_text
from testkit.slack import CHANNEL, Harness, runtime_of, slack_bot
from tests.slackapp.test_home import open_home

ALICE = "UALICE"


def called(call: Any, tool: str) -> bool:
    """The model's input holds a call of `tool` (so its output too: the run went on)."""
    items = call.input if isinstance(call.input, list) else []
    return any(isinstance(i, dict) and i.get("name") == tool for i in items)


def model(respond: Any) -> ScriptedModel:
    return ScriptedModel([ModelStep.respond(respond) for _ in range(20)])


def desk() -> Agent[Any]:
    """`front` hands "pay" off to `payments`, asks `clerk` (an agent used as a tool) to
    "refund", and sends "mail" itself; each side effect needs a person."""

    @function_tool(needs_approval=True)
    def transfer(amount: int) -> str:
        """Move money."""
        return f"transferred {amount}"

    @function_tool(needs_approval=True)
    def refund(amount: int) -> str:
        """Refund a customer."""
        return f"refunded {amount}"

    @function_tool(needs_approval=True)
    def send_email(to: str) -> str:
        """Send an email."""
        return f"sent to {to}"

    def one_tool(tool: str, arguments: dict[str, Any], done: str) -> Any:
        def respond(call: Any) -> Any:
            if called(call, tool):
                return [assistant_message(done)]
            return [function_call(tool, arguments, call_id=f"call-{uuid.uuid4().hex[:8]}")]

        return respond

    def front_says(call: Any) -> Any:
        if called(call, "ask_clerk") or called(call, "send_email"):
            return [assistant_message("front: done")]
        text, call_id = last_user_text(call), f"call-{uuid.uuid4().hex[:8]}"
        if "pay" in text:
            return [function_call("transfer_to_payments", {}, call_id=call_id)]
        if "refund" in text:
            return [function_call("ask_clerk", {"input": text}, call_id=call_id)]
        return [function_call("send_email", {"to": "ana@example.com"}, call_id=call_id)]

    payments = Agent(
        name="payments",
        model=model(one_tool("transfer", {"amount": 5}, "payments: done")),
        tools=[transfer],
    )
    clerk = Agent(
        name="clerk", model=model(one_tool("refund", {"amount": 7}, "clerk: done")), tools=[refund]
    )
    return Agent(
        name="front",
        model=model(front_says),
        handoffs=[handoff(payments)],
        tools=[clerk.as_tool("ask_clerk", "Ask the clerk to refund a customer."), send_email],
    )


@pytest.fixture
async def bot(local_store: LocalStore) -> AsyncIterator[Harness]:
    async with slack_bot(local_store, runtime_of(local_store, desk())) as harness:
        yield harness


async def card_for(bot: Harness, text: str) -> tuple[Message, Message]:
    top = await bot.mention(ALICE, text)
    [card] = await bot.api.wait_for(
        lambda: [m for m in bot.api.bot_replies(CHANNEL, top.ts) if m.blocks]
    )
    await bot.settled(top.ts, Status.AWAITING_APPROVAL)
    return top, card


def heading(card: Message) -> str:
    assert card.blocks is not None
    return str(card.blocks[0]["text"]["text"])


async def test_a_request_names_the_agent_that_asks_unless_it_is_the_bots_own(
    bot: Harness,
) -> None:
    _, paying = await card_for(bot, "pay bob")
    refunding_top, refunding = await card_for(bot, "refund ann")
    _, mailing = await card_for(bot, "mail ana")
    assert heading(paying) == (
        ":raised_hand: *Approval needed*: `transfer`, asked by the `payments` agent"
    )
    assert heading(refunding) == (
        ":raised_hand: *Approval needed*: `refund`, asked by the `clerk` agent"
    )
    assert heading(mailing) == ":raised_hand: *Approval needed*: `send_email`"

    home = json.dumps(await open_home(bot, ALICE))
    assert "`transfer`, asked by the `payments` agent" in home
    assert "`refund`, asked by the `clerk` agent" in home
    assert '`send_email`"' in home and home.count("asked by") == 2

    await bot.click(refunding, APPROVE, ALICE)
    await bot.api.wait_for(
        lambda: "front: done" in [m.text for m in bot.api.bot_replies(CHANNEL, refunding_top.ts)]
    )
    decided = bot.api.messages[(refunding.channel, refunding.ts)]
    shown = json.dumps(decided.blocks)
    assert f"`refund` approved by <@{ALICE}>" in shown
    assert "Asked by the `clerk` agent." in shown
