"""A conversation paused for approval, and the agent changed before anyone decided: the bot
is stopped, its agent's instructions change, and it starts again on the same storage and the
same Slack (a second runtime, as a deploy starts one). The real bolt app, signed requests,
the recording Web API stand-in; both storage backends.

Once set aside, the conversation has one name wherever people and operators read it:
"set aside" (`/agent-admin status` and `list`, the Home tab, `/resume`), as its thread's
notice and its closed card say."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agents import Agent

from bot.permalink import permalink
from bot.settings import RuntimeSettings
from bot.slackapp.blocks import APPROVE
from bot.standin.slack_api import Message, SlackWebApi
from storage import Status, Store
from testkit.runtime import SideEffects, build_agent, email_then_answer
from testkit.slack import CHANNEL, TEAM, Harness, running_api, runtime_of, slack_bot
from tests.slackapp.test_home import open_home

ALICE, ADMIN = "UALICE", "UADMIN"
SETTINGS = RuntimeSettings(admins=frozenset({ADMIN}))


def agent(effects: SideEffects, *, version: int) -> Agent[Any]:
    """The same tools; version 2 has other instructions (so another fingerprint)."""
    built = build_agent(email_then_answer(), effects)
    return built if version == 1 else built.clone(instructions="Be brief.")


@asynccontextmanager
async def bot_of(
    store: Store, api: SlackWebApi, effects: SideEffects, *, version: int
) -> AsyncIterator[Harness]:
    make = runtime_of(store, agent(effects, version=version), SETTINGS)
    async with slack_bot(store, make, admins=SETTINGS.admins, api=api) as harness:
        yield harness


async def paused_by_the_first_agent(
    store: Store, api: SlackWebApi, effects: SideEffects
) -> tuple[Message, Message]:
    """Alice's request and its card, the run paused for approval; then the bot stops."""
    async with bot_of(store, api, effects, version=1) as bot:
        top = await bot.mention(ALICE, "email Ana")
        [card] = await api.wait_for(lambda: bot.api.bot_replies(CHANNEL, top.ts))
        await bot.settled(top.ts, Status.AWAITING_APPROVAL)
    assert card.blocks is not None and APPROVE in json.dumps(card.blocks)
    return top, card


async def test_a_conversation_set_aside_has_one_name_everywhere(
    store: Store, effects: SideEffects
) -> None:
    api = SlackWebApi(team=TEAM)
    async with running_api(api):
        top, card = await paused_by_the_first_agent(store, api, effects)
        async with bot_of(store, api, effects, version=2) as bot:
            await bot.click(card, APPROVE, ALICE)
            await bot.settled(top.ts, Status.SET_ASIDE)
            assert effects.calls("send_email") == []

            _, token = await bot.command("/agent-admin", "status", ADMIN)
            [status] = await bot.responses_for(token)
            _, token = await bot.command("/agent-admin", "list", ADMIN)
            [listing] = await bot.responses_for(token)
            link = permalink(bot.key(top.ts))
            _, token = await bot.command("/resume", link, ALICE)
            [resumed] = await bot.responses_for(token)
            home = json.dumps(await open_home(bot, ALICE), ensure_ascii=False)
            admin_home = json.dumps(await open_home(bot, ADMIN), ensure_ascii=False)

    assert "• set aside: 1" in status["text"]
    assert f"|{bot.key(top.ts)}> · set aside · last activity" in listing["text"]
    assert "was set aside; send a new message to start over" in resumed["text"]
    assert f"|Thread {top.ts}> · last activity" in home
    assert "· set aside (send a new message to start over)" in home
    assert "set aside: 1" in admin_home
    for shown in (status["text"], listing["text"], resumed["text"], home, admin_home):
        assert "restart" not in shown and "needs_restart" not in shown
