"""The agent experience through the real bolt app and the Web API stand-in: an agent session
while the run works (processing, then closed; titled with the first request), the answer
streamed with its tool steps and closed as the recorded answer (marked, with feedback
buttons), feedback kept, Stop; and the fallbacks where Slack refuses sessions (the status
line and the bot's own Stop control), a stream or a status."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.settings import RuntimeSettings
from bot.slackapp.agent_blocks import FEEDBACK, STOP
from bot.standin.slack_api import Message
from storage import FeedbackTally, Status, Store
from testkit.runtime import SideEffects, build_agent
from testkit.slack import CHANNEL, TEAM, Harness, runtime_of, slack_bot

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
    runtime = runtime_of(local_store, build_agent(model, effects), RuntimeSettings())
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
    session = bot.api.session(CHANNEL, top.ts)
    assert session is not None and [s for _, s in session.statuses] == ["processing", "closed"]
    assert (session.title, session.initiator) == ("why tides?", ALICE)
    # The stream that closes as the answer closes the session in the same call.
    assert bot.api.called("chat.stopStream")[-1].args["session_status"] == "closed"
    assert len(bot.api.called("agents.sessions.setStatus")) == 1
    # The session shows the work: no status line, and no Stop control of the bot's own.
    assert not bot.api.called("assistant.threads.setStatus")
    assert not [m for m in bot.api.thread(CHANNEL, top.ts) if m.ephemeral_to]


def held_reply_model(gate: asyncio.Event) -> ScriptedModel:
    async def first(call: Any) -> Any:
        await gate.wait()  # the reply arrives while this run works
        return [assistant_message("The first answer.")]

    return ScriptedModel([ModelStep.respond(first), [assistant_message("The second answer.")]])


HELD_GATE = asyncio.Event()


@pytest.mark.parametrize("bot", [held_reply_model(HELD_GATE)], indirect=True)
async def test_a_reply_held_during_a_run_opens_the_closed_session_again(bot: Harness) -> None:
    """The first answer's stream closes the session; the run for the reply that waited
    meanwhile shows as processing again, and its end closes the session again."""
    top = await bot.mention(ALICE, "first question")
    await bot.api.wait_for(lambda: bot.api.session(CHANNEL, top.ts))
    await bot.reply(ALICE, "and a second one", top.ts)  # kept (held) before its 200
    HELD_GATE.set()

    def both() -> list[Message]:
        found = [m for m in bot.api.bot_replies(CHANNEL, top.ts) if kind(m) == "Answer"]
        return found if len(found) == 2 else []

    answers = await bot.api.wait_for(both)
    assert [m.text.strip() for m in answers] == ["The first answer.", "The second answer."]
    await bot.settled(top.ts, Status.IDLE)
    session = bot.api.session(CHANNEL, top.ts)
    assert session is not None
    assert [s for _, s in session.statuses] == ["processing", "closed", "processing", "closed"]


REFUSED = "not_allowed_token_type"


def two_questions() -> ScriptedModel:
    return ScriptedModel(
        [
            [function_call("lookup", {"topic": "tides"}, call_id="call-lookup")],
            [assistant_message(ANSWER)],
            [assistant_message("The moon pulls.")],
        ]
    )


@pytest.mark.parametrize("bot", [two_questions()], indirect=True)
async def test_where_sessions_are_refused_the_status_line_shows_the_work(bot: Harness) -> None:
    bot.api.method_errors["agents.sessions.setStatus"] = REFUSED
    top = await bot.mention(ALICE, "why tides?")
    await answered(bot, top.ts)
    await bot.settled(top.ts, Status.IDLE)
    statuses = [change.status for change in bot.api.statuses[(CHANNEL, top.ts)]]
    assert statuses[0] == "is thinking…" and "is using lookup…" in statuses
    assert bot.api.status(CHANNEL, top.ts) is None  # cleared once the run ended
    second = await bot.mention(BOB, "and the moon?")
    await answered(bot, second.ts)
    # Decided once for the workspace: the second run does not ask again.
    assert len(bot.api.called(f"agents.sessions.setStatus:{REFUSED}")) == 1


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
    """Where sessions are refused, the bot's own Stop control (Slack's own is not there)."""
    bot.api.method_errors["agents.sessions.setStatus"] = "method_not_supported_for_channel_type"
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
    [no] = [r for r in bot.api.responses if r["_token"] == refused]
    assert "Only the person who started this run" in no["text"]
    status, token = await bot.press(offers[0], STOP, ALICE)
    assert status == 200
    # Kept and answered before Slack was acknowledged: a process lost after the ack
    # loses neither (chaos 180096, a SIGKILL 0.1 s after the ack).
    [yes] = [r for r in bot.api.responses if r["_token"] == token]
    assert yes["text"] == "Stopping it now." and yes.get("replace_original") is True
    stopped: list[Message] = await bot.api.wait_for(
        lambda: [m for m in bot.api.bot_replies(CHANNEL, top.ts) if kind(m) == "Notice"],
        within=10,
    )
    assert f"Stopped by <@{ALICE}>" in stopped[0].text
    await bot.settled(top.ts, Status.IDLE)
    assert not [m for m in bot.api.bot_replies(CHANNEL, top.ts) if kind(m) == "Answer"]


@pytest.mark.parametrize("bot", [slow_model()], indirect=True)
async def test_slacks_stop_ends_a_run_and_closes_its_session(bot: Harness) -> None:
    """Slack's own stop control (`agent_session_stopped`) is the durable stop: refused for
    someone who took no part, honoured for the run's starter; the session is closed."""
    top = await bot.mention(ALICE, "write me an essay")
    await bot.api.wait_for(lambda: bot.api.session(CHANNEL, top.ts))
    streams = bot.api.stop_session(CHANNEL, top.ts)
    stopped_by_bob = session_stopped(top.ts, BOB, streams)
    assert await bot.send_event(stopped_by_bob) == 200
    [no] = await bot.api.wait_for(
        lambda: [m for m in bot.api.thread(CHANNEL, top.ts) if m.ephemeral_to == BOB]
    )
    assert "Only the person who started this run" in no.text
    assert await bot.send_event(session_stopped(top.ts, ALICE, streams)) == 200
    stopped: list[Message] = await bot.api.wait_for(
        lambda: [m for m in bot.api.bot_replies(CHANNEL, top.ts) if kind(m) == "Notice"],
        within=10,
    )
    assert f"Stopped by <@{ALICE}>" in stopped[0].text
    await bot.settled(top.ts, Status.IDLE)
    session = bot.api.session(CHANNEL, top.ts)
    assert session is not None and session.status == "closed"
    assert not [m for m in bot.api.bot_replies(CHANNEL, top.ts) if kind(m) == "Answer"]


def session_stopped(thread_ts: str, user: str, streams: list[str]) -> dict[str, Any]:
    return {
        "type": "agent_session_stopped",
        "channel": CHANNEL,
        "thread_ts": thread_ts,
        "user": user,
        "streaming_message_ts": streams,
        "event_ts": f"{time.time():.6f}",
    }


async def test_slacks_stop_where_nothing_runs_closes_the_session(bot: Harness) -> None:
    top = await bot.mention(ALICE, "why tides?")
    await answered(bot, top.ts)
    await bot.settled(top.ts, Status.IDLE)
    session = bot.api.session(CHANNEL, top.ts)
    assert session is not None
    session.statuses.append((time.time(), "processing"))  # left so by a process now gone
    assert await bot.send_event(session_stopped(top.ts, ALICE, [])) == 200
    await bot.api.wait_for(lambda: session.status == "closed")


@pytest.mark.parametrize("bot", [slow_model()], indirect=True)
async def test_without_the_stop_event_the_bot_offers_its_own_stop(bot: Harness) -> None:
    """Slack warns that the app does not get its stop's event: the bot's Stop control is
    offered beside the session."""
    bot.api.session_stop_subscribed = False
    top = await bot.mention(ALICE, "write me an essay")
    offers = await bot.api.wait_for(
        lambda: [m for m in bot.api.thread(CHANNEL, top.ts) if m.ephemeral_to == ALICE],
        within=15,
    )
    assert "Stop" in str(offers[0].blocks)
    status, _ = await bot.press(offers[0], STOP, ALICE)
    assert status == 200
    await bot.settled(top.ts, Status.IDLE)


@pytest.mark.parametrize("bot", [slow_model()], indirect=True)
async def test_the_reply_stop_stops_a_run(bot: Harness) -> None:
    top = await bot.mention(ALICE, "write me an essay")
    await bot.api.wait_for(lambda: bot.api.called("agents.sessions.setStatus"))
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
    bot.api.method_errors["agents.sessions.setStatus"] = REFUSED
    bot.api.failures["assistant.threads.setStatus"] = [REFUSED]
    top = await bot.mention(ALICE, "why tides?")
    await answered(bot, top.ts)
    await bot.api.wait_for(lambda: bot.api.called("reactions.remove"))
    assert [c.args["name"] for c in bot.api.called("reactions.add")] == ["eyes"]
    assert bot.api.called("reactions.add")[0].args["timestamp"] == top.ts
