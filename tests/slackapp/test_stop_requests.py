"""Who may stop a run, a stop Slack delivers again, and stops and clicks at a full backlog,
through the real bolt app (signed requests, the Web API stand-in), on both backends (issue
49): a reply kept while a run waits does not make its author the run's starter; a stop is
keyed by Slack's own ids, so a delivery Slack repeats stops nothing more; and a stop or an
Approve click is never refused at the thread's backlog cap."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.settings import RuntimeSettings
from bot.slackapp.agent_blocks import STOP, stop_blocks
from bot.slackapp.blocks import APPROVE
from bot.standin import requests
from bot.standin.slack_api import Message
from storage import Status
from testkit.runtime import SideEffects, after_a_tool, build_agent, last_user_text
from testkit.slack import CHANNEL, Harness, runtime_of, slack_bot
from tests.conftest import Backend

ALICE, BOB, CAROL = "UALICE", "UBOB", "UCAROL"


class Gates:
    """What the test's model waits on, and says it reached: per kind of request."""

    def __init__(self) -> None:
        self.started: dict[str, asyncio.Event] = {}
        self.release: dict[str, asyncio.Event] = {}

    def reached(self, name: str) -> asyncio.Event:
        return self.started.setdefault(name, asyncio.Event())

    def gate(self, name: str) -> asyncio.Event:
        return self.release.setdefault(name, asyncio.Event())


def model(gates: Gates) -> ScriptedModel:
    """Asks to send an email when told to; otherwise waits at the gate named by the first
    word it knows in the newest message (an essay's is never opened: it is stopped), then
    answers, naming what it answered."""

    async def respond(call: Any) -> Any:
        if after_a_tool(call):
            return [assistant_message("email sent")]
        text = last_user_text(call)
        if "email" in text:
            email = {"to": "ana@example.com", "body": "hi"}
            return [function_call("send_email", email, call_id="call-email")]
        for name in ("essay", "haiku", "long"):
            if name in text:
                gates.reached(name).set()
                await gates.gate(name).wait()
                return [assistant_message(f"{name.upper()} ANSWER")]
        return [assistant_message(f"MODEL ANSWERED: {text}")]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(30)])


@asynccontextmanager
async def bot_on(
    backend: Backend, effects: SideEffects, gates: Gates, *, max_runs: int = 4, **store: Any
) -> AsyncIterator[Harness]:
    opened = backend.open(**store)
    settings = RuntimeSettings(max_runs=max_runs)
    async with slack_bot(
        opened, runtime_of(opened, build_agent(model(gates), effects), settings)
    ) as bot:
        yield bot


def posts(bot: Harness, thread_ts: str, having: str) -> list[Message]:
    return [m for m in bot.api.bot_replies(CHANNEL, thread_ts) if having in m.text]


def told(bot: Harness, thread_ts: str, user: str, having: str) -> list[Message]:
    return [
        m for m in bot.api.thread(CHANNEL, thread_ts) if m.ephemeral_to == user and having in m.text
    ]


async def seen(bot: Harness, found: Callable[[], list[Message]]) -> list[Message]:
    result: list[Message] = await bot.api.wait_for(found, within=30)
    return result


async def paused_for_approval(bot: Harness) -> tuple[Message, Message]:
    """Alice's run, waiting for her approval: her mention and the card."""
    top = await bot.mention(ALICE, "email ana please")
    [card] = await seen(bot, lambda: [m for m in bot.api.bot_replies(CHANNEL, top.ts) if m.blocks])
    await bot.settled(top.ts, Status.AWAITING_APPROVAL)
    return top, card


async def test_a_reply_while_a_run_waits_does_not_let_its_author_stop_it(
    backend: Backend, effects: SideEffects
) -> None:
    """r29: Bob, who never wrote in Alice's thread, replies while her run waits for approval
    and every run slot is busy: his reply is kept (it takes the free thread, then waits for a
    slot) but does not make him the run's starter, so his `stop` is refused privately; the
    run goes on waiting for Alice, whose own `stop` stops it."""
    gates = Gates()
    async with bot_on(backend, effects, gates, max_runs=1) as bot:
        top, _ = await paused_for_approval(bot)
        await bot.mention(CAROL, "a long question")  # holds the only slot
        await gates.reached("long").wait()
        await bot.reply(BOB, "what is this about?", top.ts)
        record = bot.record(top.ts)
        assert record is not None and record.run_by == ALICE and BOB in record.participants
        await bot.reply(BOB, "stop", top.ts)
        await seen(bot, lambda: told(bot, top.ts, BOB, "Only the person who started this run"))
        gates.gate("long").set()  # Alice's thread is served: Bob's reply waits for the run
        await seen(bot, lambda: posts(bot, top.ts, "I kept your message"))
        await bot.settled(top.ts, Status.AWAITING_APPROVAL)
        assert not posts(bot, top.ts, "Stopped")
        await bot.reply(ALICE, "stop", top.ts)
        await seen(bot, lambda: posts(bot, top.ts, f"Stopped by <@{ALICE}>"))
        assert not effects.calls("send_email")


async def test_a_stop_slack_delivers_again_stops_nothing_more(
    backend: Backend, effects: SideEffects
) -> None:
    """r21: Slack delivers an event again when it did not see its first ack (same event id,
    `X-Slack-Retry-Num`). Slack's stop of run 1, delivered again while run 2 works, does not
    stop run 2; the reply `stop` that stopped a run, delivered again once nothing runs, is
    neither kept as a message nor answered by the model."""
    gates = Gates()
    async with bot_on(backend, effects, gates) as bot:
        top = await bot.mention(ALICE, "write me an essay")
        await gates.reached("essay").wait()
        await bot.api.wait_for(lambda: bot.api.session(CHANNEL, top.ts))
        streams = bot.api.stop_session(CHANNEL, top.ts)
        event = requests.agent_session_stopped(
            user=ALICE, channel=CHANNEL, thread_ts=top.ts, streams=streams
        )
        assert await bot.send_event(event, event_id="EvSTOP0000001") == 200
        await seen(bot, lambda: posts(bot, top.ts, f"Stopped by <@{ALICE}>"))
        await bot.settled(top.ts, Status.IDLE)
        await bot.reply(ALICE, "ok, just a haiku then", top.ts)
        await gates.reached("haiku").wait()
        assert await bot.send_event(event, event_id="EvSTOP0000001", retry=1) == 200
        record = bot.record(top.ts)  # kept (or not) before the ack: nothing was
        assert record is not None and record.stop_by is None
        gates.gate("haiku").set()
        await seen(bot, lambda: posts(bot, top.ts, "HAIKU ANSWER"))
        assert len(posts(bot, top.ts, "Stopped by")) == 1

        gates.started.pop("essay")
        other = await bot.mention(ALICE, "another essay please")
        await gates.reached("essay").wait()
        said = bot.api.add_user_message(CHANNEL, ALICE, "stop", other.ts)
        stop = requests.message(
            user=ALICE, text="stop", ts=said.ts, channel=CHANNEL, thread_ts=other.ts, team=bot.team
        )
        assert await bot.send_event(stop, event_id="EvSTOPREPLY01") == 200
        await seen(bot, lambda: posts(bot, other.ts, f"Stopped by <@{ALICE}>"))
        await bot.settled(other.ts, Status.IDLE)
        before = bot.record(other.ts)
        assert await bot.send_event(stop, event_id="EvSTOPREPLY01", retry=1) == 200
        after = bot.record(other.ts)
        assert before is not None and after is not None
        assert (after.inbox_seq, after.status) == (before.inbox_seq, Status.IDLE)  # not kept
        assert not posts(bot, other.ts, "MODEL ANSWERED")


async def test_a_stop_click_delivered_twice_is_one_stop(
    backend: Backend, effects: SideEffects
) -> None:
    """The same click on the bot's Stop control, delivered twice (its trigger id and action
    alike), stops the run it was made for, and not the next one."""
    gates = Gates()
    async with bot_on(backend, effects, gates) as bot:
        top = await bot.mention(ALICE, "write me an essay")
        await gates.reached("essay").wait()
        control = {"ts": top.ts, "text": "", "blocks": stop_blocks(bot.key(top.ts))}
        click = requests.block_actions(
            team=bot.team,
            user=ALICE,
            channel=CHANNEL,
            message=control,
            action_id=STOP,
            value=str(bot.key(top.ts)),
            response_url=f"{bot.api_url}/respond/stop1",
            thread_ts=top.ts,
            ephemeral=True,
        )
        assert (await bot.post(click, requests.FORM)).status == 200
        await seen(bot, lambda: posts(bot, top.ts, f"Stopped by <@{ALICE}>"))
        await bot.settled(top.ts, Status.IDLE)
        await bot.reply(ALICE, "ok, just a haiku then", top.ts)
        await gates.reached("haiku").wait()
        assert (await bot.post(click, requests.FORM)).status == 200
        record = bot.record(top.ts)
        assert record is not None and record.stop_by is None
        gates.gate("haiku").set()
        await seen(bot, lambda: posts(bot, top.ts, "HAIKU ANSWER"))
        assert len(posts(bot, top.ts, "Stopped by")) == 1


async def test_slacks_stop_at_a_full_backlog_stops_the_run(
    backend: Backend, effects: SideEffects
) -> None:
    """r24: the thread's backlog is full (`BOT_BACKLOG_LIMIT` 2) while the run works; Slack's
    stop is kept all the same and stops the run. The messages refused are told, quoted."""
    gates = Gates()
    async with bot_on(backend, effects, gates, backlog_limit=2) as bot:
        top = await bot.mention(ALICE, "write me an essay")
        await gates.reached("essay").wait()
        for i in range(3):  # the thread fills up: the last two are refused
            await bot.reply(BOB, f"bob's message {i}", top.ts)
        streams = bot.api.stop_session(CHANNEL, top.ts)
        stop = requests.agent_session_stopped(
            user=ALICE, channel=CHANNEL, thread_ts=top.ts, streams=streams
        )
        assert await bot.send_event(stop) == 200
        await seen(bot, lambda: posts(bot, top.ts, f"Stopped by <@{ALICE}>"))
        [refused] = await seen(bot, lambda: posts(bot, top.ts, "I couldn't take"))
        assert "“bob's message 1”" in refused.text and "“bob's message 2”" in refused.text
        await seen(bot, lambda: posts(bot, top.ts, "MODEL ANSWERED: bob's message 0"))
        await bot.settled(top.ts, Status.IDLE)
        assert not posts(bot, top.ts, "ESSAY ANSWER")
        assert not posts(bot, top.ts, "“”")


async def test_an_approve_click_at_a_full_backlog_is_applied(
    backend: Backend, effects: SideEffects
) -> None:
    """r24b: Alice's run waits for approval while another thread holds the only run slot and
    two replies fill her thread's backlog (`BOT_BACKLOG_LIMIT` 2). Her Approve click is kept
    all the same (before its ack), and the call runs once when the thread is served; the
    thread is never told of a message `“”` it could not take."""
    gates = Gates()
    async with bot_on(backend, effects, gates, max_runs=1, backlog_limit=2) as bot:
        top, card = await paused_for_approval(bot)
        await bot.mention(CAROL, "a long question")  # holds the only slot
        await gates.reached("long").wait()
        for i in range(2):  # queued in Alice's thread (no slot): its backlog is full
            await bot.reply(BOB, f"bob {i}", top.ts)
        assert await bot.click(card, APPROVE, ALICE) == 200
        kept = [e.payload for e in bot.store.read_inbox(bot.key(top.ts))]
        assert any('"kind":"decision"' in payload for payload in kept)
        gates.gate("long").set()
        await seen(bot, lambda: posts(bot, top.ts, "email sent"))
        assert len(effects.calls("send_email")) == 1
        assert not posts(bot, top.ts, "“”") and not posts(bot, top.ts, "I couldn't take")
