"""The App Home tab through the real bolt app and the Web API stand-in: each person sees the
approvals they may decide (their own runs'; an approver, the workspace's) with the thread
card's own buttons, and their recent conversations; a decision from Home is the thread's
decision (Reject runs nothing, a late click is answered on the tab) and the tab is published
again; a new request is published on the tabs of who may decide it once its run is paused
(a tab read before that is followed by one that lists it; at most ten approvers'); an admin
sees the counts and stale conversations, and Discard (behind a confirmation) discards one,
refused to anyone else, and never one that changed since the tab listed it."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.admin import AdminCommands
from bot.runtime import Listed
from bot.settings import RuntimeSettings
from bot.slackapp.blocks import APPROVE, REJECT
from bot.slackapp.home import CHANGED
from bot.slackapp.home_blocks import DISCARD
from bot.standin import requests
from bot.standin.slack_api import Message
from storage import Status, Store
from testkit.runtime import SideEffects, build_agent
from testkit.slack import CHANNEL, TEAM, Harness, runtime_of, slack_bot

ALICE, BOB, APPROVER, ADMIN, STRANGER = "UALICE", "UBOB", "UAPPROVER", "UADMIN", "USTRANGER"


def two_emails() -> ScriptedModel:
    def email(call_id: str) -> list[Any]:
        return [
            function_call("send_email", {"to": "ana@example.com", "body": "hi"}, call_id=call_id)
        ]

    return ScriptedModel(
        [
            email("call-a"),
            email("call-b"),
            [assistant_message("B done.")],  # Bob's is decided first
            [assistant_message("A done.")],
        ]
    )


@pytest.fixture
async def bot(local_store: Store, effects: SideEffects) -> AsyncIterator[Harness]:
    settings = RuntimeSettings(approvers=frozenset({APPROVER}), admins=frozenset({ADMIN}))
    runtime = runtime_of(local_store, build_agent(two_emails(), effects), settings)
    async with slack_bot(local_store, runtime, admins=frozenset({ADMIN})) as harness:
        yield harness


async def waiting_card(bot: Harness, user: str, text: str) -> tuple[Message, Message]:
    top = await bot.mention(user, text)
    [card] = await bot.api.wait_for(
        lambda: [m for m in bot.api.bot_replies(CHANNEL, top.ts) if m.blocks], within=15
    )
    await bot.settled(top.ts, Status.AWAITING_APPROVAL)
    return top, card


async def open_home(bot: Harness, user: str) -> dict[str, Any]:
    published = len(bot.api.views.get(user, []))
    event = requests.app_home_opened(user=user, channel=f"D0{user}", tab="home")
    assert await bot.send_event(event) == 200
    view: dict[str, Any] = await bot.api.wait_for(
        lambda: len(bot.api.views.get(user, [])) > published and bot.api.home(user)
    )
    return view


def elements(blocks: list[dict[str, Any]] | None, action_id: str) -> list[dict[str, Any]]:
    found = []
    for block in blocks or []:
        for element in [*block.get("elements", []), block.get("accessory") or {}]:
            if element.get("action_id") == action_id:
                found.append(element)
    return found


async def click(bot: Harness, user: str, view: dict[str, Any], element: dict[str, Any]) -> None:
    body = requests.view_actions(
        team=TEAM, user=user, view=view, action_id=element["action_id"], value=element["value"]
    )
    assert (await bot.post(body, requests.FORM)).status == 200


async def test_each_person_sees_what_they_may_decide_and_decides_it_there(
    bot: Harness, effects: SideEffects
) -> None:
    a_top, a_card = await waiting_card(bot, ALICE, "email ana")
    b_top, b_card = await waiting_card(bot, BOB, "email ana too")
    card_value = {
        top.ts: elements(card.blocks, APPROVE)[0]["value"]
        for top, card in (
            (a_top, a_card),
            (b_top, b_card),
        )
    }
    alice = await open_home(bot, ALICE)
    assert [e["value"] for e in elements(alice["blocks"], APPROVE)] == [card_value[a_top.ts]]
    assert f"|Thread {a_top.ts}>" in json.dumps(alice)  # her recent conversation, and link
    bob = await open_home(bot, BOB)
    assert [e["value"] for e in elements(bob["blocks"], REJECT)] == [card_value[b_top.ts]]
    approver = await open_home(bot, APPROVER)  # the workspace's, newest first
    assert [e["value"] for e in elements(approver["blocks"], APPROVE)] == [
        card_value[b_top.ts],
        card_value[a_top.ts],
    ]
    stranger = await open_home(bot, STRANGER)
    assert elements(stranger["blocks"], APPROVE) == []
    assert "Nothing is waiting on you." in json.dumps(stranger)
    assert "Admin" not in json.dumps(stranger)

    published = len(bot.api.views[BOB])
    await click(bot, BOB, bob, elements(bob["blocks"], REJECT)[0])
    await bot.api.wait_for(
        lambda: "B done." in [m.text for m in bot.api.bot_replies(CHANNEL, b_top.ts)]
    )
    refreshed = await bot.api.wait_for(
        lambda: len(bot.api.views[BOB]) > published and bot.api.home(BOB)
    )
    assert elements(refreshed["blocks"], REJECT) == []
    assert effects.calls("send_email") == []  # rejected from Home: not run

    await click(bot, APPROVER, approver, elements(approver["blocks"], APPROVE)[1])  # Alice's
    await bot.api.wait_for(
        lambda: "A done." in [m.text for m in bot.api.bot_replies(CHANNEL, a_top.ts)]
    )
    # A late click from Alice's stale tab: answered on the tab, nothing runs again.
    published = len(bot.api.views[ALICE])
    await click(bot, ALICE, alice, elements(alice["blocks"], APPROVE)[0])
    late = await bot.api.wait_for(
        lambda: len(bot.api.views.get(ALICE, [])) > published and bot.api.home(ALICE)
    )
    assert elements(late["blocks"], APPROVE) == []
    assert f"That call was already approved by <@{APPROVER}>." in json.dumps(late)
    assert len(effects.calls("send_email")) == 1


async def test_an_admin_sees_counts_and_discards_a_stale_one_behind_a_confirmation(
    bot: Harness, local_store: Store
) -> None:
    top, _ = await waiting_card(bot, ALICE, "email ana")
    later = local_store.clock() + timedelta(days=2)
    local_store.clock = lambda: later  # idle for two days: stale
    home = await open_home(bot, ADMIN)
    text = json.dumps(home)
    assert "awaiting approval: 1" in text
    [discard] = elements(home["blocks"], DISCARD)
    assert (
        Listed.model_validate_json(discard["value"]).key == bot.key(top.ts)
        and discard["confirm"]["confirm"]["text"] == "Discard"
    )

    published = len(bot.api.views.get(ALICE, []))  # her tab, published when her request came
    await click(bot, ALICE, home, discard)  # not an admin: nothing changes
    refused = await bot.api.wait_for(
        lambda: len(bot.api.views.get(ALICE, [])) > published and bot.api.home(ALICE)
    )
    assert "Only bot admins may discard" in json.dumps(refused)
    record = bot.record(top.ts)
    assert record is not None and record.status is Status.AWAITING_APPROVAL

    published = len(bot.api.views[ADMIN])
    await click(bot, ADMIN, home, discard)
    after = await bot.api.wait_for(
        lambda: len(bot.api.views[ADMIN]) > published and bot.api.home(ADMIN)
    )
    assert elements(after["blocks"], DISCARD) == []
    assert "Discarded; the thread was told." in json.dumps(after)
    record = bot.record(top.ts)
    assert record is not None and record.status is Status.DISCARDED
    assert any(":wastebasket:" in m.text for m in bot.api.bot_replies(CHANNEL, top.ts))


async def test_stale_is_as_long_as_bot_stale_after_says(
    local_store: Store, effects: SideEffects
) -> None:
    """`BOT_STALE_AFTER` (an hour here): a paused thread idle for half of it is not stale,
    neither on the admin's tab nor for `/agent-admin list stale`; idle for two hours it is
    listed, and its Discard (checked against the same age) discards it."""
    settings = RuntimeSettings(admins=frozenset({ADMIN}), stale_after=timedelta(hours=1))
    runtime = runtime_of(local_store, build_agent(two_emails(), effects), settings)
    async with slack_bot(local_store, runtime, admins=frozenset({ADMIN})) as bot:
        top, _ = await waiting_card(bot, ALICE, "email ana")
        admin = AdminCommands(bot.runtime, lambda key: str(key))
        start = local_store.clock()
        local_store.clock = lambda: start + timedelta(minutes=30)
        home = await open_home(bot, ADMIN)
        assert elements(home["blocks"], DISCARD) == []
        assert "idle longer than 1h" in json.dumps(home)
        assert await admin.listing(stale=True, older_than=None) == (
            "No conversations idle longer than 1h."
        )

        local_store.clock = lambda: start + timedelta(hours=2)
        assert str(bot.key(top.ts)) in await admin.listing(stale=True, older_than=None)
        home = await open_home(bot, ADMIN)
        [discard] = elements(home["blocks"], DISCARD)
        published = len(bot.api.views[ADMIN])
        await click(bot, ADMIN, home, discard)
        after = await bot.api.wait_for(
            lambda: len(bot.api.views[ADMIN]) > published and bot.api.home(ADMIN)
        )
        assert "Discarded; the thread was told." in json.dumps(after)
        record = bot.record(top.ts)
        assert record is not None and record.status is Status.DISCARDED


async def test_a_discard_from_a_tab_that_listed_the_thread_stale_leaves_it_once_it_came_back(
    local_store: Store, effects: SideEffects
) -> None:
    """The admin's tab listed Alice's thread as stale; then she approved and the run is
    working (and later answered). Discard from that tab changes nothing, and says so."""
    go = asyncio.Event()

    async def answer_when_told(call: Any) -> Any:
        await go.wait()
        return [assistant_message("Sent, and here is the answer.")]

    model = ScriptedModel(
        [
            [function_call("send_email", {"to": "ana@example.com", "body": "hi"}, call_id="c1")],
            ModelStep.respond(answer_when_told),
        ]
    )
    settings = RuntimeSettings(admins=frozenset({ADMIN}))
    runtime = runtime_of(local_store, build_agent(model, effects), settings)
    async with slack_bot(local_store, runtime, admins=frozenset({ADMIN})) as bot:
        top, card = await waiting_card(bot, ALICE, "email ana")
        later = local_store.clock() + timedelta(days=2)
        local_store.clock = lambda: later  # idle for two days: stale
        home = await open_home(bot, ADMIN)
        [discard] = elements(home["blocks"], DISCARD)

        assert await bot.click(card, APPROVE, ALICE) == 200  # back to life: it runs
        await bot.api.wait_for(lambda: effects.calls("send_email"))
        record = bot.record(top.ts)
        assert record is not None and record.status is Status.RUNNING

        async def discard_from_the_old_tab() -> str:
            published = len(bot.api.views[ADMIN])
            await click(bot, ADMIN, home, discard)
            after = await bot.api.wait_for(
                lambda: len(bot.api.views[ADMIN]) > published and bot.api.home(ADMIN)
            )
            return json.dumps(after)

        assert CHANGED in await discard_from_the_old_tab()  # while it runs
        record = bot.record(top.ts)
        assert record is not None and record.status is Status.RUNNING
        go.set()
        await bot.settled(top.ts, Status.IDLE)
        assert CHANGED in await discard_from_the_old_tab()  # once it has answered
        replies = [m.text for m in bot.api.bot_replies(CHANNEL, top.ts)]
        assert "Sent, and here is the answer." in replies
        assert not any(":wastebasket:" in text for text in replies)
        record = bot.record(top.ts)
        assert record is not None and record.status is Status.IDLE


def last_home(bot: Harness, user: str) -> dict[str, Any] | None:
    """The view last published for `user`, once it lists an approval."""
    view = bot.api.home(user)
    return view if view and elements(view["blocks"], APPROVE) else None


async def test_a_new_request_is_published_on_the_tabs_of_who_may_decide_it(
    bot: Harness,
) -> None:
    """Alice and an approver have their tabs open (nothing waiting); Alice asks for
    something that needs approval: both tabs are published again, listing it, without
    being opened again. Bob's (someone else's run) is not."""
    for user in (ALICE, APPROVER, BOB):
        assert "Nothing is waiting on you." in json.dumps(await open_home(bot, user))
    bob_views = len(bot.api.views[BOB])
    _, card = await waiting_card(bot, ALICE, "email ana")
    value = elements(card.blocks, APPROVE)[0]["value"]
    for user in (ALICE, APPROVER):
        view = await bot.api.wait_for(partial(last_home, bot, user), within=15)
        assert [e["value"] for e in elements(view["blocks"], APPROVE)] == [value]
    assert len(bot.api.views[BOB]) == bob_views


async def test_a_tab_opened_while_the_request_is_committed_is_followed_by_one_showing_it(
    bot: Harness,
) -> None:
    """The request's checkpoint is committed and its card on its way (held in flight), the
    release that lists it not made yet: a tab opened now lists nothing. Once the run is
    paused, the tab is published again, listing it."""
    card_lands = bot.api.hold("chat.postMessage")  # the first post of the run: its card
    top = await bot.mention(ALICE, "email ana")
    await bot.api.wait_for(lambda: bot.api.called("chat.postMessage:held"))
    record = bot.record(top.ts)
    assert record is not None and record.status is Status.RUNNING  # committed, not released
    assert "Nothing is waiting on you." in json.dumps(await open_home(bot, ALICE))
    card_lands.set()
    await bot.settled(top.ts, Status.AWAITING_APPROVAL)
    view = await bot.api.wait_for(lambda: last_home(bot, ALICE), within=15)
    [card] = [m for m in bot.api.bot_replies(CHANNEL, top.ts) if m.blocks]
    assert elements(view["blocks"], APPROVE) == elements(card.blocks, APPROVE)


async def test_a_new_request_publishes_at_most_ten_approvers_tabs_the_latest_viewers_first(
    local_store: Store, effects: SideEffects
) -> None:
    approvers = [f"UAPPROVER{n:02d}" for n in range(12)]
    settings = RuntimeSettings(approvers=frozenset(approvers))
    runtime = runtime_of(local_store, build_agent(two_emails(), effects), settings)
    async with slack_bot(local_store, runtime) as bot:
        lookers = approvers[-2:]  # last in order: published only because they look
        for user in lookers:
            await open_home(bot, user)
        before = {user: len(bot.api.views.get(user, [])) for user in [ALICE, *approvers]}
        await waiting_card(bot, ALICE, "email ana")
        await bot.api.wait_for(lambda: last_home(bot, ALICE), within=15)
    # Stopped: every publish it began has ended (`HomeTab.close`).
    again = [user for user in approvers if len(bot.api.views.get(user, [])) > before[user]]
    assert len(again) == 10 and set(lookers) <= set(again)
    assert all(last_home(bot, user) for user in again)


async def test_a_tab_read_before_the_request_never_lands_after_the_one_that_lists_it(
    bot: Harness,
) -> None:
    """Alice's tab is read before her request is listed, and its publish is slow (held in
    flight); the refresh that lists the request takes its turn after it, so the tab she is
    left with lists it. (Were they not in turn, the refresh would land first and the older
    read last.)"""
    card_lands = bot.api.hold("chat.postMessage")
    top = await bot.mention(ALICE, "email ana")
    await bot.api.wait_for(lambda: bot.api.called("chat.postMessage:held"))
    opened_lands = bot.api.hold("views.publish")
    event = requests.app_home_opened(user=ALICE, channel=f"D0{ALICE}", tab="home")
    assert await bot.send_event(event) == 200
    await bot.api.wait_for(lambda: bot.api.called("views.publish:held"))
    card_lands.set()
    await bot.settled(top.ts, Status.AWAITING_APPROVAL)  # the refresh is asked now
    # Not in turn, the refresh would publish meanwhile (within milliseconds); in turn, it
    # waits for the tab in flight. Waiting longer only makes a regression likelier to show.
    with contextlib.suppress(TimeoutError):
        await bot.api.wait_for(lambda: bot.api.views.get(ALICE), within=1)
    assert ALICE not in bot.api.views
    opened_lands.set()
    await bot.api.wait_for(lambda: len(bot.api.views.get(ALICE, [])) == 2)
    first, last = bot.api.views[ALICE]
    assert "Nothing is waiting on you." in json.dumps(first)
    assert elements(last["blocks"], APPROVE)
