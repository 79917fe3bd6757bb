"""Every message survives what real deployments do, shown with real processes: the bot
(`python -m bot serve`) killed right after acknowledging a message, stopped by SIGTERM in
the middle of an approved side effect, killed with SIGKILL mid-run and replaced, and Slack
answering errors that never clear or that clear after a while. Signed requests, the recording
Web API stand-in, the real OpenAI model class against a scripted /v1/responses server."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path

import aiohttp
import pytest

from bot.standin.slack_api import Message
from storage import Status, ToolCallStatus
from testkit.deployment import Deployment, deployment, finished, record
from testkit.responses import ScriptedResponses, message, tool_call
from testkit.services import wait_until
from testkit.slack import CHANNEL
from tests.conftest import Backend

pytestmark = pytest.mark.slow


async def test_a_message_acked_then_killed_is_answered_after_restart(
    backend: Backend, tmp_path: Path
) -> None:
    """Slack got its 200, then the process died while it was still busy with the message
    (Slack answers its session status with 429s): the message was kept before the ack."""
    script = ScriptedResponses([[message("Here is your answer.")]])
    async with deployment(backend, tmp_path, script, BOT_LEASE_SECONDS="2") as bot:
        await bot.start()
        bot.api.rate_limited["agents.sessions.setStatus"] = 3  # Retry-After: 1, three times
        question = await bot.mention("UALICE", "what time is it?")
        await asyncio.to_thread(wait_until, lambda: bot.api.called("agents.sessions.setStatus:429"))
        assert await bot.signal(signal.SIGKILL) == -signal.SIGKILL
        assert bot.api.bot_replies(CHANNEL, question.ts) == []
        await bot.start()
        replies = await bot.api.wait_for(
            lambda: [r for r in bot.api.bot_replies(CHANNEL, question.ts) if "answer" in r.text],
            within=30,
        )
        assert [r.text for r in replies] == ["Here is your answer."]
        await finished(bot, question)
        assert [r.text for r in bot.api.bot_replies(CHANNEL, question.ts)][-1] == (
            "Here is your answer."
        )


def transfer_script() -> ScriptedResponses:
    """Transfer (approved by a person), then check the balance (another turn), then answer."""
    return ScriptedResponses(
        [
            [tool_call("transfer", {"amount": 5, "to": "bob"}, "call-transfer")],
            [tool_call("balance", {"account": "bob"}, "call-balance")],
            [message("Transferred 5 to bob.")],
        ]
    )


async def approved_transfer_running(bot: Deployment) -> Message:
    """Mention, approve, and wait until the transfer is executing."""
    question = await bot.mention("UALICE", "transfer 5 to bob")
    [card] = await bot.api.wait_for(lambda: bot.api.bot_replies(CHANNEL, question.ts))
    assert await bot.click_approve(card, "UALICE") == 200
    await asyncio.to_thread(wait_until, lambda: bot.transfers(), 30)
    return question


async def test_sigterm_during_an_approved_side_effect_lets_it_finish(
    backend: Backend, tmp_path: Path
) -> None:
    """A deploy's SIGTERM while the approved transfer runs: the tool finishes within the
    grace, its turn is checkpointed with the result, the thread is given up at once (before
    the next turn), and the next process continues from there. It ran once and is never
    reported as failed."""
    async with deployment(
        backend, tmp_path, transfer_script(), TRANSFER_SECONDS="2", BOT_SHUTDOWN_GRACE="20s"
    ) as bot:
        await bot.start()
        question = await approved_transfer_running(bot)
        assert await bot.signal(signal.SIGTERM) == 0
        state = record(bot, question)
        assert state.status is Status.RUNNING and state.lease_owner is None  # given up at once
        call = bot.store.get_tool_call(state.key, "call-transfer")
        assert call is not None and call.status is ToolCallStatus.COMPLETED
        assert call.output == "transferred 5 to bob"
        await bot.start()
        await bot.api.wait_for(
            lambda: any(
                r.text == "Transferred 5 to bob." for r in bot.api.bot_replies(CHANNEL, question.ts)
            ),
            within=30,
        )
    assert len(bot.transfers()) == 1
    texts = [r.text for r in bot.api.bot_replies(CHANNEL, question.ts)]
    assert texts.count("Transferred 5 to bob.") == 1
    assert not any("The run stopped" in t or "error" in t for t in texts), texts


async def test_sigterm_past_the_grace_reports_the_outcome_unknown(
    backend: Backend, tmp_path: Path
) -> None:
    """The transfer outlives the grace: it is cut short, stays `started` in the ledger (never
    "failed"), and the next process says its outcome is unknown and does not run it again."""
    async with deployment(
        backend, tmp_path, transfer_script(), TRANSFER_SECONDS="30", BOT_SHUTDOWN_GRACE="1s"
    ) as bot:
        await bot.start()
        question = await approved_transfer_running(bot)
        assert await bot.signal(signal.SIGTERM) == 0
        state = record(bot, question)
        call = bot.store.get_tool_call(state.key, "call-transfer")
        assert call is not None and call.status is ToolCallStatus.STARTED  # not "error: ..."
        assert state.lease_owner is None
        await bot.start()
        replies = await bot.api.wait_for(
            lambda: (
                (r := bot.api.bot_replies(CHANNEL, question.ts))
                and r[-1].text == "Transferred 5 to bob."
                and r
            ),
            within=30,
        )
    assert any("outcome is unknown" in r.text for r in replies)
    assert len(bot.transfers()) == 1  # not run again
    final = bot.store.get_tool_call(state.key, "call-transfer")
    assert final is not None and final.status is ToolCallStatus.STARTED


async def test_kill_mid_run_resumes_within_five_seconds_of_health(
    backend: Backend, tmp_path: Path
) -> None:
    """SIGKILL while the model is answering, with the default 30 s lease: the new process on
    this host proves its predecessor dead and takes the thread over at once."""
    release = threading.Event()
    script = ScriptedResponses(
        [
            [message("(never delivered: the process dies while this is held)")],
            [tool_call("transfer", {"amount": 1, "to": "ann"}, "call-1")],
        ],
        holds={0: release},
    )
    async with deployment(backend, tmp_path, script) as bot:
        bot.env.pop("BOT_LEASE_SECONDS", None)
        await bot.start()
        question = await bot.mention("UALICE", "transfer 1 to ann")
        await asyncio.to_thread(wait_until, lambda: len(script.requests) >= 1)
        assert await bot.signal(signal.SIGKILL) == -signal.SIGKILL
        release.set()
        healthy = await bot.start()
        await bot.api.wait_for(
            lambda: any(r.blocks for r in bot.api.bot_replies(CHANNEL, question.ts)), within=30
        )
        resumed_after = time.monotonic() - healthy
    assert resumed_after < 5, f"resumed {resumed_after:.1f}s after the new process was healthy"
    assert bot.transfers() == []  # it only asked for approval


async def test_a_channel_that_says_not_in_channel_is_not_retried_for_ever(
    backend: Backend, tmp_path: Path
) -> None:
    script = ScriptedResponses([[message("An answer nobody can see.")]])
    async with deployment(backend, tmp_path, script, BOT_LEASE_SECONDS="1") as bot:
        await bot.start()
        bot.api.channel_errors["C0GONE"] = "not_in_channel"
        question = await bot.mention("UALICE", "hello", channel="C0GONE")
        await finished(bot, question)  # given up on, not left for the recovery sweeps
        attempts = bot.api.called("chat.postMessage:not_in_channel")
        assert 1 <= len(attempts) <= 2, len(attempts)
        async with aiohttp.ClientSession() as http, http.get(f"{bot.url}/healthz") as health:
            assert health.status == 200
        state = record(bot, question)
    assert state.status is Status.IDLE and state.lease_owner is None
    assert state.delivery_error == "not_in_channel"


async def test_a_transient_slack_error_that_clears_is_delivered_once(
    backend: Backend, tmp_path: Path
) -> None:
    script = ScriptedResponses([[message("Delivered in the end.")]])
    async with deployment(backend, tmp_path, script, BOT_LEASE_SECONDS="1") as bot:
        await bot.start()
        # More 5xx answers than slack_sdk's own retries absorb: the runtime backs off.
        bot.api.failures["chat.postMessage"] = [500, 500, 500, 500]
        question = await bot.mention("UALICE", "hello")
        replies = await bot.api.wait_for(
            lambda: bot.api.bot_replies(CHANNEL, question.ts), within=40
        )
        await finished(bot, question)  # any duplicate would have been posted by now
        state = record(bot, question)
    assert [r.text for r in bot.api.bot_replies(CHANNEL, question.ts)] == ["Delivered in the end."]
    assert replies
    assert state.status is Status.IDLE and state.lease_owner is None


LONG_ANSWER = " ".join(f"word{n}" for n in range(40)) + "."


async def test_killed_mid_stream_ends_with_exactly_one_complete_answer(
    backend: Backend, tmp_path: Path
) -> None:
    """SIGKILL while the answer streams into the thread: the half-written reply is replaced
    by a note, the new process streams the answer again in a new reply, and the thread ends
    with the answer once, complete."""
    midway = threading.Event()
    script = ScriptedResponses(
        [[message(LONG_ANSWER)], [message(LONG_ANSWER)]], delta_delay=0.01, midway={0: midway}
    )
    async with deployment(backend, tmp_path, script) as bot:
        await bot.start()
        question = await bot.mention("UALICE", "say forty words")
        half = await bot.api.wait_for(
            lambda: [
                m
                for m in bot.api.bot_replies(CHANNEL, question.ts, streaming=True)
                if "word5" in m.streamed
            ]
        )
        assert await bot.signal(signal.SIGKILL) == -signal.SIGKILL
        midway.set()
        assert half[0].metadata is None and LONG_ANSWER not in half[0].streamed
        await bot.start()
        await finished(bot, question)
    replies = bot.api.bot_replies(CHANNEL, question.ts)
    complete = [r for r in replies if LONG_ANSWER in (r.streamed or r.text)]
    assert len(complete) == 1, [r.streamed or r.text for r in replies]
    assert (complete[0].metadata or {})["event_payload"]["kind"] == "Answer"
    [old] = [r for r in replies if r.ts == half[0].ts]
    assert "interrupted by a restart" in old.text and not old.streaming
    assert any("resuming where I left off" in r.text for r in replies)


def answers(
    bot: Deployment, question: Message, text: str = "Here is your answer."
) -> list[Message]:
    return [m for m in bot.api.bot_replies(CHANNEL, question.ts) if m.text == text]


@pytest.mark.parametrize("backend", ["local"], indirect=True)  # Slack's side: one backend
async def test_a_post_in_flight_at_a_kill_ends_as_one_copy(
    backend: Backend, tmp_path: Path
) -> None:
    """SIGKILL while the answer's chat.postMessage is in flight (Slack has the request; the
    message shows later). The next process reads the thread back, finds nothing and posts the
    answer again; then the first post lands. The second read-back, a moment later, deletes
    the later copy: the thread ends with the answer once."""
    answer = "Here is your answer."
    script = ScriptedResponses([[message(answer)]])
    async with deployment(backend, tmp_path, script, BOT_DUPLICATE_CHECK_SECONDS="1") as bot:
        bot.api.streaming_refused.add(CHANNEL)  # so the answer goes out with chat.postMessage
        await bot.start()
        landing = bot.api.hold("chat.postMessage")
        question = await bot.mention("UALICE", "what time is it?")
        await bot.api.wait_for(lambda: bot.api.called("chat.postMessage:held"))
        assert await bot.signal(signal.SIGKILL) == -signal.SIGKILL
        await bot.start()
        await bot.api.wait_for(
            lambda: [c for c in bot.api.called("chat.postMessage") if c.args["text"] == answer]
        )
        assert bot.api.called("chat.delete") == []
        landing.set()  # the dead process's post lands after the new one's read-back
        copies = await bot.api.wait_for(lambda: len(r := answers(bot, question)) == 2 and r)
        others = [m for m in bot.api.bot_replies(CHANNEL, question.ts) if m not in copies]
        [deleted] = await bot.api.wait_for(lambda: bot.api.called("chat.delete"), within=10)
        await finished(bot, question)
    assert copies[0].metadata == copies[1].metadata  # the same outbox entry and part
    assert deleted.args["ts"] == copies[1].ts  # the later copy goes
    assert answers(bot, question) == [copies[0]]
    assert [m for m in bot.api.bot_replies(CHANNEL, question.ts) if m not in copies] == others
    assert any("resuming where I left off" in m.text for m in others)
    assert len(bot.api.called("chat.delete")) == 1
    assert "a second copy of" in bot.log.read_text()
