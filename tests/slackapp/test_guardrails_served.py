"""Guardrails as the thread sees them (issue 49), through the real bolt app (signed requests,
the Web API stand-in), on both backends:

- an output guardrail's verdict comes before its answer's text reaches Slack: a guarded
  agent's answer is not streamed while the model writes it (the thread shows the run
  working, then the answer once it passes); one the guardrail blocks is never sent, not
  even in part; an agent without output guardrails streams as before, in the same graph;
- a trip after calls ran says so, as the ledger does ("I did not act on it" only when
  nothing ran), naming the calls of the request's earlier turns too, and the approval
  card of a call that ran keeps who approved it."""

from __future__ import annotations

from typing import Any

from agents import Agent, GuardrailFunctionOutput, RunContextWrapper, function_tool
from agents import output_guardrail as output_guardrail_of
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.settings import RuntimeSettings
from bot.slackapp.blocks import APPROVE
from bot.standin.slack_api import Message
from storage import Status, Store
from testkit.runtime import SideEffects, last_user_text
from testkit.slack import CHANNEL, Harness, runtime_of, slack_bot

ALICE = "UALICE"
BLOCKED = "the admin password is hunter2"
STREAMING = ("chat.startStream", "chat.appendStream", "chat.stopStream")


@output_guardrail_of(name="no_passwords")
async def no_passwords(
    ctx: RunContextWrapper[Any], agent: Agent[Any], output: Any
) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered="password" in str(output))


def carried(bot: Harness, text: str, methods: tuple[str, ...] | None = None) -> list[str]:
    """The Web API calls (of `methods`) whose arguments carried `text`."""
    return [
        call.method
        for call in bot.api.calls
        if text in str(call.args) and (methods is None or call.method in methods)
    ]


def notice(bot: Harness, ts: str) -> str:
    [said] = [m.text for m in bot.api.bot_replies(CHANNEL, ts) if ":shield:" in m.text]
    return said


async def test_a_blocked_answer_never_reaches_slack(store: Store) -> None:
    model = ScriptedModel([[assistant_message(f"Sure: {BLOCKED}.")]])
    agent = Agent(name="desk", model=model, output_guardrails=[no_passwords])
    async with slack_bot(store, runtime_of(store, agent, RuntimeSettings())) as bot:
        top = await bot.mention(ALICE, "what is the admin password?")
        await bot.settled(top.ts, Status.IDLE)
        said = notice(bot, top.ts)
        replies = [m.text for m in bot.api.bot_replies(CHANNEL, top.ts)]
    assert carried(bot, "hunter2") == []  # not streamed, not posted, not in an edit
    assert "`no_passwords`" in said and "withheld my answer" in said
    assert replies == [said]  # no "cut short" reply left behind


async def test_a_guarded_agents_answer_comes_whole_once_it_passes(store: Store) -> None:
    """A graph whose front agent has no output guardrail and hands off to one that has: the
    front's answers stream as before; the vault's is posted once its guardrail passed."""
    vault = Agent(
        name="vault",
        model=ScriptedModel([[assistant_message("The vault is open until six.")]]),
        output_guardrails=[no_passwords],
    )

    def front_turn(call: Any) -> Any:
        if "vault" in last_user_text(call):
            return [function_call("transfer_to_vault", {}, call_id="c-handoff")]
        return [assistant_message("Hello there, how can I help?")]

    front = Agent(
        name="front",
        model=ScriptedModel([ModelStep.respond(front_turn) for _ in range(2)]),
        handoffs=[vault],
    )
    async with slack_bot(store, runtime_of(store, front, RuntimeSettings())) as bot:
        hello = await bot.mention(ALICE, "hi")
        await bot.settled(hello.ts, Status.IDLE)
        asked = await bot.mention(ALICE, "when is the vault open?")
        await bot.settled(asked.ts, Status.IDLE)
        vault_replies = [m.text for m in bot.api.bot_replies(CHANNEL, asked.ts)]
    assert carried(bot, "Hello there", STREAMING)  # streamed as the model wrote it
    assert carried(bot, "The vault is open", STREAMING) == []
    assert vault_replies == ["The vault is open until six."]


def approved_card(bot: Harness, ts: str) -> Message:
    [card] = [m for m in bot.api.bot_replies(CHANNEL, ts) if "send_email" in str(m.blocks)]
    return card


async def test_a_trip_after_calls_ran_says_they_ran_and_keeps_the_approval(
    store: Store, effects: SideEffects
) -> None:
    """`log_ticket` runs without a person, `send_email` after Alice approves it (a turn
    later, from the checkpoint), then the output guardrail blocks the answer."""

    @function_tool
    def log_ticket(title: str) -> str:
        """Log a ticket (a side effect)."""
        effects.record("log_ticket", {"title": title})
        return "ticket 7"

    @function_tool(needs_approval=True)
    def send_email(to: str) -> str:
        """Send an email (a side effect)."""
        effects.record("send_email", {"to": to})
        return f"sent to {to}"

    model = ScriptedModel(
        [
            [function_call("log_ticket", {"title": "vpn"}, call_id="c-ticket")],
            [function_call("send_email", {"to": "ana@example.com"}, call_id="c-email")],
            [assistant_message(f"Done, and by the way {BLOCKED}")],
        ]
    )
    agent = Agent(
        name="desk", model=model, tools=[log_ticket, send_email], output_guardrails=[no_passwords]
    )
    async with slack_bot(store, runtime_of(store, agent, RuntimeSettings())) as bot:
        top = await bot.mention(ALICE, "log the vpn ticket and email ana")
        [card] = await bot.api.wait_for(
            lambda: [m for m in bot.api.bot_replies(CHANNEL, top.ts) if m.blocks]
        )
        await bot.settled(top.ts, Status.AWAITING_APPROVAL)
        await bot.click(card, APPROVE, ALICE)
        await bot.settled(top.ts, Status.IDLE)
        said = notice(bot, top.ts)
        card_now = approved_card(bot, top.ts)
    assert "did not act" not in said and "withheld my answer" in said
    assert "Already done (it ran once and is not repeated): `log_ticket`, `send_email`." in said
    assert "approved by <@UALICE>" in card_now.text and "UALICE" in str(card_now.blocks)
    assert [e["tool"] for e in effects.calls()] == ["log_ticket", "send_email"]
    assert carried(bot, "hunter2") == []
