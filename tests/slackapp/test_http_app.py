"""The Slack layer through real HTTP: signed requests into the real bolt app, the runtime
and storage behind it, and the recording Web API stand-in in front."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import AsyncIterator

import pytest
from agents.testing import ScriptedModel

from bot.settings import RuntimeSettings
from bot.slackapp.blocks import APPROVE, REJECT
from bot.standin import requests
from bot.standin.slack_api import Message
from bot.wiring import MakeRuntime
from storage import Status, Store
from testkit.runtime import (
    SideEffects,
    build_agent,
    echo_model,
    email_then_answer,
    record_of,
)
from testkit.slack import CHANNEL, TEAM, Harness, runtime_of, signed_headers, slack_bot, thread_key

ADMIN, ALICE, BOB = "UADMIN", "UALICE", "UBOB"


def make_runtime(store: Store, model: ScriptedModel, effects: SideEffects) -> MakeRuntime:
    return runtime_of(store, build_agent(model, effects), RuntimeSettings())


@pytest.fixture
async def bot(
    local_store: Store, effects: SideEffects, request: pytest.FixtureRequest
) -> AsyncIterator[Harness]:
    model = getattr(request, "param", None) or echo_model(60)
    async with slack_bot(
        local_store, make_runtime(local_store, model, effects), admins=frozenset({ADMIN})
    ) as harness:
        yield harness


async def test_mention_then_reply_in_thread(bot: Harness) -> None:
    top = await bot.mention(ALICE, "hello there")
    [answer] = await bot.bot_replies(top.ts, 1)
    assert answer.thread_ts == top.ts and answer.text == "echo: hello there"
    await bot.reply(BOB, "and a follow-up", top.ts)  # no mention needed inside the thread
    replies = await bot.bot_replies(top.ts, 2)
    assert replies[1].text == "echo: and a follow-up"
    # A reply in a thread the bot is not part of is ignored: answered, and not kept (so
    # there is nothing to serve).
    other = bot.api.add_user_message(CHANNEL, BOB, "unrelated")
    await bot.reply(BOB, "no bot here", other.ts)
    assert bot.record(other.ts) is None
    assert bot.api.bot_replies(CHANNEL, other.ts) == []


async def test_edits_bots_and_own_messages_are_ignored(bot: Harness) -> None:
    top = await bot.mention(ALICE, "start")
    await bot.bot_replies(top.ts, 1)
    await bot.settled(top.ts, Status.IDLE)
    before = bot.record(top.ts)
    assert before is not None
    thread = {"channel": CHANNEL, "thread_ts": top.ts, "team": TEAM}
    for event in (
        requests.message(
            **thread,
            ts=bot.api.next_ts(),
            subtype="message_changed",
            message={"text": "edited"},
        ),
        requests.message(
            **thread, ts=bot.api.next_ts(), text="beep", subtype="bot_message", bot_id="BOTHER"
        ),
        requests.message(**thread, ts=bot.api.next_ts(), user=bot.api.bot_user, text="my own"),
    ):
        assert await bot.send_event(event) == 200
    # Each was answered after the bot decided what to keep: nothing was (the thread's inbox
    # counter did not move), so nothing is left to serve.
    after = bot.record(top.ts)
    assert after is not None and after.inbox_seq == before.inbox_seq
    assert (after.status, after.lease_owner) == (Status.IDLE, None)
    assert len(bot.api.bot_replies(CHANNEL, top.ts)) == 1


async def test_direct_messages_map_to_threads(bot: Harness) -> None:
    message = bot.api.add_user_message("D0ALICE", ALICE, "hi in private")
    event = requests.direct_message(
        user=ALICE, text=message.text, ts=message.ts, channel="D0ALICE", team=TEAM
    )
    assert await bot.send_event(event) == 200
    [answer] = await bot.bot_replies(message.ts, 1, channel="D0ALICE")
    assert answer.text == "echo: hi in private"


async def test_a_retried_delivery_is_handled_once(bot: Harness) -> None:
    message = bot.api.add_user_message(CHANNEL, ALICE, f"<@{bot.api.bot_user}> once")
    event = requests.app_mention(
        user=ALICE, text=message.text, ts=message.ts, channel=CHANNEL, team=TEAM
    )
    assert await bot.send_event(event, event_id="EvSAME") == 200
    assert await bot.send_event(event, event_id="EvSAME", retry=1) == 200
    assert await bot.send_event(event, event_id="EvSAME", retry=2) == 200
    await bot.bot_replies(message.ts, 1)
    # Released idle, the thread has answered all it kept: the message, once.
    await bot.settled(message.ts, Status.IDLE)
    record = bot.record(message.ts)
    assert record is not None and record.inbox_seq == 1
    assert len(bot.api.bot_replies(CHANNEL, message.ts)) == 1


async def test_forged_and_stale_requests_get_401_and_do_nothing(bot: Harness) -> None:
    message = bot.api.add_user_message(CHANNEL, ALICE, "<@UBOT> forged")
    body = bot.event_body(
        requests.app_mention(
            user=ALICE, text=message.text, ts=message.ts, channel=CHANNEL, team=TEAM
        )
    )
    for headers in (
        signed_headers(body, secret="wrong-secret"),
        signed_headers(body, timestamp=int(time.time()) - 600),
        {"X-Slack-Request-Timestamp": str(int(time.time())), "X-Slack-Signature": "v0=deadbeef"},
    ):
        async with bot.http.post(
            f"{bot.bot_url}/slack/events",
            data=body.encode(),
            headers={"Content-Type": "application/json", **headers},
        ) as response:
            assert response.status == 401
    # bolt checks the signature before any listener runs: the 401 ends the handling.
    assert bot.api.called("chat.postMessage") == []
    assert bot.record(message.ts) is None


@pytest.mark.parametrize("bot", [email_then_answer()], indirect=True)
async def test_approval_by_button(bot: Harness, effects: SideEffects) -> None:
    top = await bot.mention(ALICE, "email Ana")
    [posted] = await bot.bot_replies(top.ts, 1)
    approval = copy.deepcopy(posted)  # as the user's client still shows it
    assert approval.blocks is not None and "send_email" in json.dumps(approval.blocks)
    assert "ana@example.com" in json.dumps(approval.blocks)
    assert effects.calls() == []
    # The card names who may decide; a click is kept before it is acknowledged, so it
    # counts even when it lands while the run is still letting the thread go.
    assert "<@UALICE> can decide" in json.dumps(approval.blocks)

    assert await bot.click(approval, APPROVE, BOB) == 200  # not the requester, not an approver
    [refusal] = await bot.api.wait_for(lambda: bot.api.responses)
    assert refusal["response_type"] == "ephemeral"
    assert refusal["text"] == "Only <@UALICE> can decide this one."
    assert effects.calls() == []

    assert await bot.click(approval, APPROVE, ALICE) == 200
    replies = await bot.bot_replies(top.ts, 2)
    # The card itself says the decision: no second message says it again.
    assert [r.text for r in replies] == [
        ":white_check_mark: `send_email` approved by <@UALICE>",
        "Done: email sent.",
    ]
    assert replies[0].ts == posted.ts
    assert len(effects.calls("send_email")) == 1
    blocks = replies[0].blocks or []
    assert all(block["type"] != "actions" for block in blocks)
    assert "`send_email` approved by <@UALICE>" in json.dumps(blocks)

    assert await bot.click(approval, REJECT, ALICE) == 200  # a late click on the old message
    late = await bot.api.wait_for(lambda: len(bot.api.responses) >= 2 and bot.api.responses)
    assert late[1]["response_type"] == "ephemeral"
    assert late[1]["text"] == "That call was already approved by <@UALICE>."
    assert len(effects.calls("send_email")) == 1


async def replied_to_the_card(bot: Harness, text: str) -> tuple[Message, list[Message]]:
    """Alice asks for an email; once the run shows its card, she replies `text`. Her
    message, and the bot's first two replies in the thread."""
    top = await bot.mention(ALICE, "email Ana")
    await bot.bot_replies(top.ts, 1)
    await bot.reply(ALICE, text, top.ts)
    return top, await bot.bot_replies(top.ts, 2)


@pytest.mark.parametrize("bot", [email_then_answer()], indirect=True)
async def test_reply_while_paused(bot: Harness, effects: SideEffects) -> None:
    top, replies = await replied_to_the_card(bot, "wait, what will it say?")
    assert "kept your message" in replies[1].text
    await bot.settled(top.ts, Status.AWAITING_APPROVAL)
    assert len(bot.api.bot_replies(CHANNEL, top.ts)) == 2  # no second copy of the request
    assert effects.calls() == []


@pytest.mark.parametrize("bot", [email_then_answer()], indirect=True)
async def test_reply_approve_decides(bot: Harness, effects: SideEffects) -> None:
    _, replies = await replied_to_the_card(bot, "approve")
    # The card, found by its call, says the decision; the answer follows, nothing between.
    assert [r.text for r in replies] == [
        ":white_check_mark: `send_email` approved by <@UALICE>",
        "Done: email sent.",
    ]
    assert len(effects.calls("send_email")) == 1


@pytest.mark.parametrize("bot", [email_then_answer()], indirect=True)
async def test_resume_command(bot: Harness) -> None:
    top = await bot.mention(ALICE, "email Ana")
    await bot.bot_replies(top.ts, 1)
    await bot.settled(top.ts, Status.AWAITING_APPROVAL)
    status, token = await bot.command("/resume", "", ALICE)
    assert status == 200
    [listing] = await bot.responses_for(token)
    listed = json.dumps(listing["blocks"])  # waiting for a decision: its request, no Resume
    assert top.ts.replace(".", "") in listed and "see its request" in listed
    assert "resume_thread" not in listed

    link = f"https://local.slack.com/archives/{CHANNEL}/p{top.ts.replace('.', '')}"
    status, token = await bot.command("/resume", f"<{link}>", ALICE)
    assert status == 200
    [pointer] = await bot.responses_for(token)
    assert "waiting for a decision on `send_email`" in pointer["text"]
    assert len(bot.api.bot_replies(CHANNEL, top.ts)) == 1  # the request is not posted again

    # Someone who never took part gets the same answer as for a thread that does not exist.
    _, token = await bot.command("/resume", link, BOB)
    [neutral] = await bot.responses_for(token)
    nowhere = f"https://local.slack.com/archives/{CHANNEL}/p1000000000000001"
    _, token = await bot.command("/resume", nowhere, BOB)
    [missing] = await bot.responses_for(token)
    assert neutral["text"] == missing["text"] and "can't resume" in neutral["text"]

    status, token = await bot.command("/resume", "not a link", ALICE)
    [error] = await bot.responses_for(token)
    assert "not a thread link" in error["text"]


async def test_resume_of_an_idle_thread_says_why_not(bot: Harness) -> None:
    top = await bot.mention(ALICE, "hi")
    await bot.bot_replies(top.ts, 1)
    await bot.settled(top.ts, Status.IDLE)
    link = f"https://local.slack.com/archives/{CHANNEL}/p{top.ts.replace('.', '')}"
    _, token = await bot.command("/resume", link, ALICE)
    [reply] = await bot.responses_for(token)
    assert "nothing to resume" in reply["text"]


@pytest.mark.parametrize("bot", [email_then_answer()], indirect=True)
async def test_admin_discard(bot: Harness, effects: SideEffects) -> None:
    top = await bot.mention(ALICE, "email Ana")
    [posted] = await bot.bot_replies(top.ts, 1)
    approval = copy.deepcopy(posted)
    link = f"https://local.slack.com/archives/{CHANNEL}/p{top.ts.replace('.', '')}"
    await bot.settled(top.ts, Status.AWAITING_APPROVAL)

    _, token = await bot.command("/agent-admin", f"discard {link}", BOB)  # not an admin
    [refusal] = await bot.responses_for(token)
    assert "Only bot admins" in refusal["text"]
    assert record_of(bot.store, thread_key(top.ts)).status is Status.AWAITING_APPROVAL

    _, token = await bot.command("/agent-admin", "status", ADMIN)
    [status] = await bot.responses_for(token)
    assert "awaiting approval: 1" in status["text"]

    _, token = await bot.command("/agent-admin", f"discard {link}", ADMIN)
    [summary] = await bot.responses_for(token)
    assert "removed its checkpoint" in summary["text"] and "send_email" in summary["text"]
    replies = await bot.bot_replies(top.ts, 2)
    assert "discarded" in replies[1].text
    assert record_of(bot.store, thread_key(top.ts)).status is Status.DISCARDED
    assert await bot.click(approval, APPROVE, ALICE) == 200
    await bot.api.wait_for(lambda: len(bot.api.responses) >= 4)
    assert effects.calls() == []


GATE = asyncio.Event()  # runs answer only once it is set


@pytest.mark.parametrize("bot", [echo_model(60, gate=GATE)], indirect=True)
async def test_fifty_concurrent_events_are_all_acked_while_their_runs_wait(bot: Harness) -> None:
    """Keep-before-ack never waits for a run: fifty mentions at once are all acked while
    every run is held inside the model; only then are they answered. (Ack times on a busy
    machine are the benchmark's: bench/burst.py reports p50/p99.)"""
    GATE.clear()

    async def one(i: int) -> float:
        message = bot.api.add_user_message(CHANNEL, ALICE, f"<@UBOT> load {i}")
        event = requests.app_mention(
            user=ALICE, text=message.text, ts=message.ts, channel=CHANNEL, team=TEAM
        )
        started = time.perf_counter()
        assert await bot.send_event(event) == 200
        return time.perf_counter() - started

    # A deadline only so that an ack waiting for its run fails instead of hanging.
    latencies = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(50))), 120)
    print(f"acks: max {max(latencies):.3f} s")
    assert len(bot.api.called("chat.stopStream")) == 0  # every run is still held
    GATE.set()
    await bot.api.wait_for(lambda: len(bot.api.called("chat.stopStream")) >= 50, within=60)


async def test_health_and_metrics(bot: Harness) -> None:
    top = await bot.mention(ALICE, "count me")
    await bot.bot_replies(top.ts, 1)
    async with bot.http.get(f"{bot.bot_url}/healthz") as response:
        assert response.status == 200 and (await response.json())["ok"] is True
    async with bot.http.get(f"{bot.bot_url}/metrics") as response:
        text = await response.text()
    assert 'bot_slack_requests_total{kind="message"}' in text
    assert 'bot_outcomes_total{type="Answer"}' in text
    assert "bot_storage_calls_off_loop 0.0" in text  # the store's calls are on the loop


@pytest.mark.parametrize("method", ["chat.postMessage", "chat.startStream"])
async def test_rate_limited_posts_are_retried(bot: Harness, method: str) -> None:
    if method == "chat.postMessage":
        bot.api.streaming_refused.add(CHANNEL)  # answers are posted, not streamed
    bot.api.rate_limited[method] = 1
    top = await bot.mention(ALICE, "slowly")
    [answer] = await bot.bot_replies(top.ts, 1)
    assert answer.text == "echo: slowly"
    assert len(bot.api.called(f"{method}:429")) == 1


async def test_a_first_burst_does_not_call_auth_test_again(bot: Harness) -> None:
    """The server's warm-up `auth.test` authorizes every request: a burst of first events
    does not make bolt call it once per event."""
    assert len(bot.api.called("auth.test")) == 1
    tops = await asyncio.gather(*(bot.mention(ALICE, f"hello {n}") for n in range(8)))
    for top in tops:
        await bot.bot_replies(top.ts, 1)
    assert len(bot.api.called("auth.test")) == 1


async def test_web_api_calls_reuse_their_connections(bot: Harness) -> None:
    """One HTTP session for the process: calls to Slack reuse kept-alive connections
    instead of opening one (and, at slack.com, a TLS handshake) per call."""
    for n in range(3):
        top = await bot.mention(ALICE, f"hello {n}")
        await bot.bot_replies(top.ts, 1)
    calls = [call for call in bot.api.calls if call.peer is not None]
    connections = {call.peer for call in calls}
    assert len(calls) >= 10
    assert len(connections) <= len(calls) // 3, connections
