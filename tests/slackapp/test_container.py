"""The agent's container and the Home tab over real processes (`python -m bot serve`, signed
requests, the recording Web API stand-in, the real OpenAI model class against a scripted
/v1/responses server): opening the Messages tab greets once, with the agent module's
prompts; a DM is a conversation in its own thread that survives SIGKILL mid-run, told what
its author views; its approval is listed on the Home tab and Approve there runs the tool
once; a new assistant thread (the older experience) gets the prompts and its context, with
the status line where Slack refuses sessions; Slack's own stop ends a run at its next safe
point."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from typing import Any

import pytest

from bot.standin import requests
from bot.standin.slack_api import Message
from storage import ConversationKey, Status
from testkit.deployment import Deployment, deployment
from testkit.responses import ScriptedResponses, message, tool_call
from testkit.services import wait_until
from testkit.slack import TEAM
from tests.conftest import Backend

pytestmark = pytest.mark.slow

ALICE, BOB = "UALICE", "UBOB"
DM = "D0ALICE"  # Alice's DM with the app: the agent's container
VIEWED = "C0VIEWED"
PROMPTS = [
    {"title": "Pay Bob", "message": "transfer 5 to bob"},
    {"title": "Bob's balance", "message": "what is bob's balance?"},
]


async def send(bot: Deployment, event: dict[str, Any]) -> None:
    assert await bot.post(requests.event_callback(TEAM, {"team": TEAM, **event})) == 200


async def direct(bot: Deployment, text: str, thread_ts: str | None = None) -> Message:
    """Alice writes in her DM with the app (a new thread root, or in `thread_ts`)."""
    said = bot.api.add_user_message(DM, ALICE, text, thread_ts)
    event = requests.direct_message(user=ALICE, text=text, ts=said.ts, channel=DM, team=TEAM)
    if thread_ts:
        event["thread_ts"] = thread_ts
    await send(bot, event)
    return said


def model_input(script: ScriptedResponses, number: int) -> str:
    return json.dumps(script.requests[number]["input"])


def replies(bot: Deployment, thread_ts: str) -> list[str]:
    return [m.text or m.streamed for m in bot.api.bot_replies(DM, thread_ts)]


def paused(bot: Deployment, key: ConversationKey) -> bool:
    record = bot.store.get(key)
    return (
        record is not None and record.status is Status.AWAITING_APPROVAL and not record.lease_owner
    )


def buttons(view: dict[str, Any] | None, action_id: str) -> list[dict[str, Any]]:
    return [
        element
        for block in (view or {}).get("blocks", [])
        if block["type"] == "actions"
        for element in block["elements"]
        if element["action_id"] == action_id
    ]


async def test_the_container_greets_once_and_a_dm_survives_a_kill_and_is_approved_from_home(
    backend: Backend, tmp_path: Any
) -> None:
    release = threading.Event()
    script = ScriptedResponses(
        [
            [message("(never delivered: the process dies while this is held)")],
            [tool_call("transfer", {"amount": 5, "to": "bob"}, "call-transfer")],
            [message("Transferred 5 to bob.")],
        ],
        holds={0: release},
    )
    async with deployment(backend, tmp_path, script) as bot:
        await bot.start()
        opened = requests.app_home_opened(user=ALICE, channel=DM, tab="messages")
        for _ in range(2):  # opened twice: greeted once
            await send(bot, opened)
        await bot.api.wait_for(lambda: bot.api.prompts.get(DM))
        [greeting] = [c.args for c in bot.api.called("chat.postMessage") if c.args["channel"] == DM]
        assert greeting["text"] == "Hello! I move money, with your approval."
        [shown] = bot.api.prompts[DM]
        assert (shown.prompts, shown.thread_ts) == (PROMPTS, None)  # the agent module's

        entity = {"type": "slack#/types/channel_id", "value": VIEWED, "team_id": TEAM}
        await send(bot, requests.app_context_changed(user=ALICE, channel=DM, entities=[entity]))
        question = await direct(bot, "transfer 5 to bob")
        await asyncio.to_thread(wait_until, lambda: len(script.requests) >= 1)
        assert await bot.signal(signal.SIGKILL) == -signal.SIGKILL
        release.set()
        await bot.start()
        [card] = await bot.api.wait_for(
            lambda: [m for m in bot.api.bot_replies(DM, question.ts) if m.blocks], within=30
        )
        # Its own thread; what she viewed went with her message, before and after the kill.
        assert card.thread_ts == question.ts
        for number in (0, 1):
            assert f"[Viewing in Slack as they wrote: channel <#{VIEWED}>]" in model_input(
                script, number
            )
        session = bot.api.session(DM, question.ts)
        assert session is not None and session.title == "transfer 5 to bob"
        await bot.api.wait_for(lambda: session.status == "suspended")
        key = ConversationKey(team=TEAM, channel=DM, thread_ts=question.ts)
        await asyncio.to_thread(wait_until, lambda: paused(bot, key))  # released as such

        await send(bot, requests.app_home_opened(user=ALICE, channel=DM, tab="home"))
        home = await bot.api.wait_for(lambda: buttons(bot.api.home(ALICE), "approval_approve"))
        [approve] = home
        assert approve["value"] == buttons({"blocks": card.blocks}, "approval_approve")[0]["value"]
        published = len(bot.api.views[ALICE])
        click = requests.view_actions(
            team=TEAM,
            user=ALICE,
            view=bot.api.home(ALICE) or {},
            action_id="approval_approve",
            value=approve["value"],
        )
        assert await bot.post(click, requests.FORM) == 200
        await bot.api.wait_for(
            lambda: "Transferred 5 to bob." in replies(bot, question.ts), within=30
        )
        # The Home tab was published again once decided: nothing waits on her any more.
        refreshed = await bot.api.wait_for(
            lambda: len(bot.api.views[ALICE]) > published and bot.api.home(ALICE)
        )
        assert buttons(refreshed, "approval_approve") == []
        assert "Nothing is waiting on you." in json.dumps(refreshed)
    assert len(bot.transfers()) == 1  # approved from Home: run once
    assert replies(bot, question.ts).count("Transferred 5 to bob.") == 1


@pytest.mark.parametrize("backend", ["local"], indirect=True)  # Slack's side: one backend
async def test_an_assistant_thread_gets_prompts_and_its_context_where_sessions_are_refused(
    backend: Backend, tmp_path: Any
) -> None:
    script = ScriptedResponses([[message("Bob has 100.")]])
    async with deployment(backend, tmp_path, script) as bot:
        bot.api.method_errors["agents.sessions.setStatus"] = "not_allowed_token_type"
        await bot.start()
        root = bot.api.add_user_message(DM, ALICE, "New chat")  # Slack's thread root
        started = requests.assistant_thread(
            "assistant_thread_started", user=ALICE, channel=DM, thread_ts=root.ts, viewing="C0OLD"
        )
        await send(bot, started)
        [shown] = await bot.api.wait_for(lambda: bot.api.prompts.get(DM))
        assert (shown.prompts, shown.thread_ts) == (PROMPTS, root.ts)
        changed = requests.assistant_thread(
            "assistant_thread_context_changed",
            user=ALICE,
            channel=DM,
            thread_ts=root.ts,
            viewing=VIEWED,
        )
        await send(bot, changed)
        await direct(bot, "what is bob's balance?", thread_ts=root.ts)
        await bot.api.wait_for(lambda: "Bob has 100." in replies(bot, root.ts), within=30)
        assert f"channel <#{VIEWED}>" in model_input(script, 0)
        # Sessions refused: the status line showed the work, and the thread got its title.
        assert bot.api.called("assistant.threads.setStatus")
        title = await bot.api.wait_for(lambda: bot.api.titles.get((DM, root.ts)))
        assert title == "what is bob's balance?"


@pytest.mark.parametrize("backend", ["local"], indirect=True)
async def test_slacks_stop_ends_a_run_at_its_next_safe_point(
    backend: Backend, tmp_path: Any
) -> None:
    release = threading.Event()
    script = ScriptedResponses([[message("(never: stopped first)")]], holds={0: release})
    async with deployment(backend, tmp_path, script) as bot:
        await bot.start()
        question = await direct(bot, "write me an essay")
        await asyncio.to_thread(wait_until, lambda: len(script.requests) >= 1)
        session = await bot.api.wait_for(lambda: bot.api.session(DM, question.ts))
        assert session.status == "processing"
        streams = bot.api.stop_session(DM, question.ts)
        stop = requests.agent_session_stopped(
            user=ALICE, channel=DM, thread_ts=question.ts, streams=streams
        )
        await send(bot, stop)
        await bot.api.wait_for(
            lambda: any(f"Stopped by <@{ALICE}>" in t for t in replies(bot, question.ts)),
            within=15,
        )
        release.set()
        await bot.api.wait_for(lambda: session.status == "closed")
        await asyncio.sleep(0.5)  # the abandoned model turn's answer would have landed by now
    assert not any("never" in text for text in replies(bot, question.ts))
