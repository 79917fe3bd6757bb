"""The model asks for two side effects in one turn and both are approved: they run one at
a time, so a process killed between or during them leaves at most one of unknown outcome,
and the other is run after the restart, once; the thread says which ran when. Real
processes (`python -m bot serve`, SIGKILL), both backends, the real OpenAI model class
against a scripted /v1/responses server, the Slack stand-in, signed requests."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from bot.standin.slack_api import Message
from testkit.deployment import Deployment, deployment, finished, record
from testkit.responses import ScriptedResponses, message, tool_call
from testkit.services import wait_until
from testkit.slack import CHANNEL
from tests.conftest import Backend

pytestmark = pytest.mark.slow

ANSWER = "Transferred 5 to bob and 7 to carol."
CALLS = ("call-bob", "call-carol")


def two_transfers() -> ScriptedResponses:
    """Two transfers asked for together (one model response), then the answer."""
    return ScriptedResponses(
        [
            [
                tool_call("transfer", {"amount": 5, "to": "bob"}, "call-bob"),
                tool_call("transfer", {"amount": 7, "to": "carol"}, "call-carol"),
            ],
            [message(ANSWER)],
        ]
    )


async def both_approved(bot: Deployment) -> Message:
    """Mention; approve each of the two calls on its own card."""
    question = await bot.mention("UALICE", "transfer 5 to bob and 7 to carol")
    cards = await bot.api.wait_for(
        lambda: len(r := bot.api.bot_replies(CHANNEL, question.ts)) >= 2 and r, within=30
    )
    for card in cards[:2]:
        assert await bot.click_approve(card, "UALICE") == 200
    return question


def ledger(bot: Deployment, question: Message) -> dict[str, str | None]:
    """What the tool ledger says of each transfer (the status's text; None: nothing)."""
    key = record(bot, question).key
    calls = {call_id: bot.store.get_tool_call(key, call_id) for call_id in CALLS}
    return {call_id: None if call is None else call.status.value for call_id, call in calls.items()}


def first_and_second(bot: Deployment) -> tuple[str, str]:
    """The call that ran before the kill, and the other (they start one at a time, in the
    order the SDK reaches them)."""
    [first] = [t["call_id"] for t in bot.transfers()]
    [second] = [call_id for call_id in CALLS if call_id != first]
    return first, second


async def answered(bot: Deployment, question: Message) -> list[str]:
    """The thread's replies once the answer is there and the thread is settled."""
    await bot.api.wait_for(
        lambda: any(r.text == ANSWER for r in bot.api.bot_replies(CHANNEL, question.ts)),
        within=60,
    )
    await finished(bot, question)
    return [r.text for r in bot.api.bot_replies(CHANNEL, question.ts)]


async def test_killed_after_the_first_ran_the_second_runs_after_the_restart(
    backend: Backend, tmp_path: Path
) -> None:
    """The first transfer ran and its result is recorded; the process dies (SIGKILL) before
    the second starts. The second was approved and never started: the next process runs it,
    once, and says so, and that the first had run before; nothing is of unknown outcome.
    (Both were recorded as started before either ran: the second was said to be of unknown
    outcome, and never run.)"""
    async with deployment(
        backend, tmp_path, two_transfers(), DIE_AFTER_RESULTS="1", BOT_LEASE_SECONDS="2"
    ) as bot:
        await bot.start()
        question = await both_approved(bot)
        assert await asyncio.to_thread(bot.current.wait, 60) == -signal.SIGKILL
        first, second = first_and_second(bot)
        assert ledger(bot, question) == {first: "completed", second: "approved"}
        del bot.env["DIE_AFTER_RESULTS"]
        await bot.start()
        texts = await answered(bot, question)
    assert sorted(t["call_id"] for t in bot.transfers()) == list(CALLS)
    assert ledger(bot, question) == {first: "completed", second: "completed"}
    [told] = [t for t in texts if "after the restart" in t]
    assert (
        f"`transfer` (call {second}) was approved before a restart and had not started; "
        "it was run once after the restart and completed."
    ) in told
    assert f"`transfer` (call {first}) had run before the restart; it was not run again." in told
    assert not any("unknown" in t for t in texts), texts
    assert texts.count(ANSWER) == 1


async def test_killed_while_the_first_runs_the_second_runs_after_the_restart(
    backend: Backend, tmp_path: Path
) -> None:
    """SIGKILL while the first transfer runs (its effect written, its result not): the
    second has not started. After the restart the first is of unknown outcome, not run
    again; the second, approved and never started, is run once; the thread says both.
    (Both were recorded as started before either ran, and ran together: the kill left both
    of unknown outcome.)"""
    async with deployment(
        backend, tmp_path, two_transfers(), TRANSFER_SECONDS="60", BOT_LEASE_SECONDS="2"
    ) as bot:
        await bot.start()
        question = await both_approved(bot)
        await asyncio.to_thread(wait_until, lambda: bot.transfers(), 30)
        assert await bot.signal(signal.SIGKILL) == -signal.SIGKILL
        first, second = first_and_second(bot)
        assert ledger(bot, question) == {first: "started", second: "approved"}
        bot.env["TRANSFER_SECONDS"] = "0"
        await bot.start()
        texts = await answered(bot, question)
    assert sorted(t["call_id"] for t in bot.transfers()) == list(CALLS)
    # the first is of unknown outcome: never started again
    assert ledger(bot, question) == {first: "started", second: "completed"}
    [unknown] = [t for t in texts if "outcome is unknown" in t]
    assert f"`transfer` (call {first}) was started before a restart" in unknown
    assert second not in unknown
    [told] = [t for t in texts if "after the restart" in t]
    assert (
        f"`transfer` (call {second}) was approved before a restart and had not started; "
        "it was run once after the restart and completed."
    ) in told
    assert first not in told
    assert texts.count(ANSWER) == 1
