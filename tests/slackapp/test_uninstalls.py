"""A workspace removes the app (`app_uninstalled`, or `tokens_revoked` naming the bot): the
removal applies to the installation it was sent for, once. Slack's redelivery of the event
after the workspace installed the app again is a duplicate, and an uninstall first delivered
after a reinstall is older than the installation: neither removes the new installation or
discards what it began. Through bolt's real OAuth flow against the Web API stand-in, signed
requests, on both backends."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.standin.slack_api import SlackWebApi
from storage import Status, Store
from testkit.runtime import SideEffects
from testkit.slack import CHANNEL, TEAM, Harness, oauth_bot, running_api
from tests.slackapp.test_many_workspaces import ALICE, BOB, runtime


@pytest.fixture
async def api() -> AsyncIterator[tuple[SlackWebApi, str]]:
    standin = SlackWebApi(team=TEAM)
    standin.teams[TEAM].channels.add(CHANNEL)
    async with running_api(standin) as url:
        yield standin, url


def removal(kind: str, standin: SlackWebApi, sent: float) -> dict[str, Any]:
    """The event Slack sends when the workspace removes the app, sent at `sent`."""
    if kind == "app_uninstalled":
        return {"type": "app_uninstalled", "event_ts": f"{sent:.6f}"}
    tokens = {"oauth": [], "bot": [standin.bot_user]}
    return {"type": "tokens_revoked", "tokens": tokens, "event_ts": f"{sent:.6f}"}


async def paused_thread(bot: Harness, user: str) -> str:
    top = await bot.mention(user, "email Ana please")
    await bot.bot_replies(top.ts, 1)
    await bot.settled(top.ts, Status.AWAITING_APPROVAL)
    return top.ts


@pytest.mark.parametrize("kind", ["app_uninstalled", "tokens_revoked"])
async def test_a_redelivered_or_late_uninstall_leaves_a_reinstall_alone(
    kind: str, store: Store, effects: SideEffects, api: tuple[SlackWebApi, str]
) -> None:
    standin, url = api
    async with oauth_bot(store, runtime(store, effects), standin, url) as bot:
        await bot.install()
        before = await paused_thread(bot, ALICE)

        # The workspace removes the app: its installation goes at once, its conversations
        # after the answer.
        standin.uninstall(TEAM)
        uninstalled_at = time.time()
        event = removal(kind, standin, uninstalled_at)
        assert await bot.send_event(event, event_id="EvREMOVED1") == 200
        assert store.find_installation(f"-:{TEAM}") is None
        await bot.settled(before, Status.DISCARDED)

        # Installed again; a new conversation waits for approval.
        await bot.install()
        installed = store.find_installation(f"-:{TEAM}")
        assert installed is not None
        after = await paused_thread(bot, BOB)

        # Slack sends the first event again (it saw no answer in time): a duplicate.
        assert await bot.send_event(event, event_id="EvREMOVED1", retry=1) == 200
        # An uninstall from before the reinstall (by more than the clocks' leeway, 5 s),
        # delivered only now: not this installation's.
        late = removal(kind, standin, uninstalled_at - 60)
        assert await bot.send_event(late, event_id="EvREMOVED0", retry=2) == 200

        # Work goes on in the workspace.
        hello = await bot.mention(ALICE, "hello again")
        [answer] = await bot.bot_replies(hello.ts, 1)
        assert answer.text == "echo: hello again"
        assert store.find_installation(f"-:{TEAM}") == installed
        record = bot.record(after)
        assert record is not None and record.status is Status.AWAITING_APPROVAL
        assert store.pending_removals() == []
    assert effects.calls("send_email") == []
