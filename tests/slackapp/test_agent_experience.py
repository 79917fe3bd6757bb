"""The agent experience through the real bolt app and the Web API stand-in: a status line
while the run works, the answer streamed with its tool steps and closed as the recorded
answer (marked, with feedback buttons), feedback kept, Stop; and the fallbacks where Slack
refuses a stream or a status."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.runtime import ConversationRuntime
from bot.settings import RuntimeSettings
from bot.slackapp.agent_blocks import FEEDBACK, STOP
from bot.standin.slack_api import Message
from storage import FeedbackTally, Status, Store
from testkit.runtime import SideEffects, build_agent
from testkit.slack import CHANNEL, TEAM, Harness, slack_bot

ADMIN, ALICE, BOB = "UADMIN", "UALICE", "UBOB"
ANSWER = "**Tides** are lunar: <!channel> see [this](https://evil.example) & `a<b`"
SAFE = "**Tides** are lunar: &lt;!channel&gt; see \\[this\\](https://evil.example) &amp; `a<b`"


def tides_model() -> ScriptedModel:
    return ScriptedModel(
        [
            [function_call("lookup", {"topic": "tides"}, call_id="call-lookup")],
            [assistant_message(ANSWER)],
        ]
    )


def slow_model() -> ScriptedModel:
    async def respond(call: Any) -> Any:
        await asyncio.sleep(60)  # a model call that takes its time
        return [assistant_message("(never: stopped first)")]

    return ScriptedModel([ModelStep.respond(respond)])


@pytest.fixture
async def bot(
    local_store: Store, effects: SideEffects, request: pytest.FixtureRequest
) -> AsyncIterator[Harness]:
    model = getattr(request, "param", None) or tides_model()
    runtime = ConversationRuntime(local_store, build_agent(model, effects), RuntimeSettings())
    async with slack_bot(local_store, runtime, admins=frozenset({ADMIN})) as harness:
        yield harness


def kind(message: Message) -> str | None:
    payload = (message.metadata or {}).get("event_payload") or {}
    return payload.get("kind")


async def answered(bot: Harness, thread_ts: str) -> Message:
    found: list[Message] = await bot.api.wait_for(
        lambda: [m for m in bot.api.bot_replies(CHANNEL, thread_ts) if kind(m) == "Answer"]
    )
    return found[0]


async def test_one_reply_shows_status_streams_steps_and_ends_with_feedback(bot: Harness) -> None:
    top = await bot.mention(ALICE, "why tides?")
    reply = await answered(bot, top.ts)
    await bot.settled(top.ts, Status.IDLE)
    # One message: the stream, closed as the recorded answer; nothing posted besides.
    assert bot.api.bot_replies(CHANNEL, top.ts) == [reply]
    assert not bot.api.called("chat.postMessage")
    assert reply.streamed.strip() == SAFE  # escaped as it streamed
    assert [(t["id"], t["title"], t["status"]) for t in reply.tasks] == [
        ("call-lookup", "lookup", "complete")
    ]
    assert reply.metadata is not None and reply.metadata["event_payload"]["part"] == 0
    assert [b["type"] for b in reply.blocks or []] == ["context_actions"]
    started = bot.api.called("chat.startStream")[0].args
    assert (started["recipient_team_id"], started["recipient_user_id"]) == (TEAM, ALICE)
    statuses = [change.status for change in bot.api.statuses[(CHANNEL, top.ts)]]
    assert statuses[0] == "is thinking…" and "is using lookup…" in statuses
    assert bot.api.status(CHANNEL, top.ts) is None  # cleared once the run ended


async def test_feedback_is_kept_per_conversation_and_counted(bot: Harness) -> None:
    top = await bot.mention(ALICE, "why tides?")
    reply = await answered(bot, top.ts)
    assert (await bot.press(reply, FEEDBACK, ALICE, thumb="positive"))[0] == 200
    assert (await bot.press(reply, FEEDBACK, BOB, thumb="negative"))[0] == 200
    assert (await bot.press(reply, FEEDBACK, BOB, thumb="positive"))[0] == 200  # changed mind
    record = bot.record(top.ts)
    assert record is not None and record.feedback == FeedbackTally(good=2, bad=0)
    async with aiohttp.ClientSession() as http, http.get(f"{bot.bot_url}/metrics") as page:
        metrics = await page.text()
    assert 'bot_feedback_total{verdict="good"} 2.0' in metrics
    status, token = await bot.command("/agent-admin", "status", ADMIN)
    assert status == 200
    [answer] = await bot.responses_for(token)
    assert "2 :thumbsup: · 0 :thumbsdown:" in answer["text"]


@pytest.mark.parametrize("bot", [slow_model()], indirect=True)
async def test_the_stop_control_stops_a_run_within_seconds(bot: Harness) -> None:
    top = await bot.mention(ALICE, "write me an essay")
    offers: list[Message] = await bot.api.wait_for(
        lambda: [
            m
            for m in bot.api.thread(CHANNEL, top.ts)
            if m.ephemeral_to == ALICE and "Stop" in str(m.blocks)
        ],
        within=15,
    )
    # Someone who took no part in the thread may not stop it.
    status, refused = await bot.press(offers[0], STOP, BOB)
    assert status == 200
    [no] = await bot.responses_for(refused)
    assert "Only the person who started this run" in no["text"]
    status, token = await bot.press(offers[0], STOP, ALICE)
    assert status == 200
    [yes] = await bot.responses_for(token)
    assert yes["text"] == "Stopping it now." and yes.get("replace_original") is True
    stopped: list[Message] = await bot.api.wait_for(
        lambda: [m for m in bot.api.bot_replies(CHANNEL, top.ts) if kind(m) == "Notice"],
        within=10,
    )
    assert f"Stopped by <@{ALICE}>" in stopped[0].text
    await bot.settled(top.ts, Status.IDLE)
    assert not [m for m in bot.api.bot_replies(CHANNEL, top.ts) if kind(m) == "Answer"]


@pytest.mark.parametrize("bot", [slow_model()], indirect=True)
async def test_the_reply_stop_stops_a_run(bot: Harness) -> None:
    top = await bot.mention(ALICE, "write me an essay")
    await bot.api.wait_for(lambda: bot.api.called("assistant.threads.setStatus"))
    await bot.reply(ALICE, "stop", top.ts)
    stopped: list[Message] = await bot.api.wait_for(
        lambda: [m for m in bot.api.bot_replies(CHANNEL, top.ts) if kind(m) == "Notice"],
        within=10,
    )
    assert f"Stopped by <@{ALICE}>" in stopped[0].text
    await bot.settled(top.ts, Status.IDLE)


async def test_where_streaming_is_refused_the_answer_is_posted(bot: Harness) -> None:
    bot.api.streaming_refused.add(CHANNEL)
    top = await bot.mention(ALICE, "why tides?")
    reply = await answered(bot, top.ts)
    await bot.settled(top.ts, Status.IDLE)
    assert bot.api.bot_replies(CHANNEL, top.ts) == [reply]
    assert [b["type"] for b in reply.blocks or []] == ["markdown", "context_actions"]
    assert (reply.blocks or [])[0]["text"] == SAFE
    assert bot.api.called("chat.startStream")  # tried, refused: no stream left behind


async def test_where_status_is_refused_a_reaction_shows_the_work(bot: Harness) -> None:
    bot.api.failures["assistant.threads.setStatus"] = ["not_allowed_token_type"]
    top = await bot.mention(ALICE, "why tides?")
    await answered(bot, top.ts)
    await bot.api.wait_for(lambda: bot.api.called("reactions.remove"))
    assert [c.args["name"] for c in bot.api.called("reactions.add")] == ["eyes"]
    assert bot.api.called("reactions.add")[0].args["timestamp"] == top.ts
