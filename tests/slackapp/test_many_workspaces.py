"""The bot for many workspaces, over HTTP: installed through Slack's OAuth flow (against the
stand-in's authorize page and `oauth.v2.access`), conversing in each workspace with that
workspace's token (the stand-in records whose token each call carried and refuses another
workspace's channels), across a restart, and removed from one of them."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.settings import RuntimeSettings
from bot.slackapp.installations import decode
from bot.slackapp.oauth import BOT_SCOPES
from bot.standin import requests
from bot.standin.slack_api import SlackWebApi
from bot.wiring import MakeRuntime
from storage import Status, Store
from storage.aws import AwsStore
from testkit.runtime import SideEffects, after_a_tool, build_agent, last_user_text
from testkit.slack import CHANNEL, TEAM, oauth_bot, running_api, runtime_of
from testkit.storage_faults import failing_reads

ALICE, BOB = "UALICE", "UBOB"
ORG, GRID_TEAM, GRID_CHANNEL = "E0ACME", "T0ACME", "C0ACME"


def assistant(steps: int = 40) -> ScriptedModel:
    """Asks to send an email when told to (the tool needs approval), else echoes."""

    def respond(call: Any) -> Any:
        if after_a_tool(call):
            return [assistant_message("Done: email sent.")]
        text = last_user_text(call)
        if "email" in text:
            arguments = {"to": "ana@example.com", "body": "hi"}
            return [function_call("send_email", arguments, call_id=f"call-{uuid.uuid4().hex}")]
        return [assistant_message(f"echo: {text}")]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(steps)])


def stand_in() -> SlackWebApi:
    """Two places to install into: a plain workspace (the harness's own), and an Enterprise
    Grid organisation with one workspace, where the app is installed org-wide."""
    api = SlackWebApi(team=TEAM)
    api.teams[TEAM].channels.add(CHANNEL)
    api.add_team(ORG, "Acme Org", org=True)
    api.add_team(GRID_TEAM, "Acme Sales", enterprise=ORG, channels=(GRID_CHANNEL,))
    return api


def runtime(store: Store, effects: SideEffects) -> MakeRuntime:
    return runtime_of(store, build_agent(assistant(), effects), RuntimeSettings())


def calls_to(api: SlackWebApi, channel: str) -> list[Any]:
    return [c for c in api.calls if (c.args.get("channel") or c.args.get("channel_id")) == channel]


def refusals(api: SlackWebApi) -> list[str]:
    return [c.method for c in api.calls if ":" in c.method]


@pytest.fixture
async def api() -> AsyncIterator[tuple[SlackWebApi, str]]:
    standin = stand_in()
    async with running_api(standin) as url:
        yield standin, url


async def test_two_workspaces_installed_served_restarted_and_one_removed(
    store: Store, effects: SideEffects, api: tuple[SlackWebApi, str]
) -> None:
    standin, url = api
    async with oauth_bot(store, runtime(store, effects), standin, url) as bot:
        plain = bot
        grid = bot.workspace(GRID_TEAM, enterprise=ORG, org_wide=True)
        assert "Thank you" in await plain.install()
        await grid.install()
        documents = {
            "-:T0LOCAL": store.find_installation(f"-:{TEAM}"),
            "E0ACME:-": store.find_installation(f"{ORG}:-"),
        }
        assert all(documents.values())
        org_install = decode(documents["E0ACME:-"] or "")
        assert org_install.is_enterprise_install and org_install.team_id is None
        assert org_install.bot_token == standin.token_of(ORG)

        top = await plain.mention(ALICE, "hello from the plain workspace")
        [answer] = await plain.bot_replies(top.ts, 1)
        assert answer.text == "echo: hello from the plain workspace"
        paused = await grid.mention(BOB, "email Ana please", channel=GRID_CHANNEL)
        [card] = await grid.bot_replies(paused.ts, 1, channel=GRID_CHANNEL)
        assert "send_email" in json.dumps(card.blocks)
        await grid.settled(paused.ts, Status.AWAITING_APPROVAL, channel=GRID_CHANNEL)
        # The enterprise is part of the grid conversation's key; the plain one's is as ever.
        assert (
            str(grid.key(paused.ts, GRID_CHANNEL))
            == f"{ORG}:{GRID_TEAM}:{GRID_CHANNEL}:{paused.ts}"
        )
        assert plain.record(top.ts) is not None
        assert grid.record(paused.ts, channel=GRID_CHANNEL) is not None

    # Every call into a workspace's channel carried that workspace's token (the org's for
    # its workspace), and none was refused.
    assert {c.team for c in calls_to(standin, CHANNEL)} == {TEAM}
    assert {c.team for c in calls_to(standin, GRID_CHANNEL)} == {ORG}
    assert refusals(standin) == []

    # A restart: a new process (runtime) on the same storage and Slack.
    async with oauth_bot(store, runtime(store, effects), standin, url) as bot:
        plain = bot
        grid = bot.workspace(GRID_TEAM, enterprise=ORG, org_wide=True)
        await plain.reply(ALICE, "still there?", top.ts)
        replies = await plain.bot_replies(top.ts, 2)
        assert replies[-1].text == "echo: still there?"
        before = len(standin.calls)

        # The organisation removes the app: Slack revokes its token and says so.
        standin.uninstall(ORG)
        assert await grid.send_event({"type": "app_uninstalled"}) == 200
        assert store.find_installation(f"{ORG}:-") is None
        # Discarded after the answer (slow for a busy workspace).
        await grid.settled(paused.ts, Status.DISCARDED, channel=GRID_CHANNEL)
        assert effects.calls("send_email") == []
        # Nothing was sent with the revoked token, and nothing more will be.
        assert [c for c in standin.calls[before:] if c.team == ORG or ":" in c.method] == []
        late = await grid.mention(BOB, "anyone?", channel=GRID_CHANNEL)
        assert grid.record(late.ts, channel=GRID_CHANNEL) is None  # not kept: not authorized

        # The plain workspace is untouched and goes on.
        assert store.find_installation(f"-:{TEAM}") is not None
        again = await plain.mention(ALICE, "and now?")
        [answer] = await plain.bot_replies(again.ts, 1)
        assert answer.text == "echo: and now?"
        assert [c for c in standin.calls[before:] if c.team == ORG] == []
        assert {c.team for c in calls_to(standin, CHANNEL)} == {TEAM}


async def test_rotating_tokens_a_reinstall_with_more_scopes_and_revoked_tokens(
    local_store: Store, effects: SideEffects, api: tuple[SlackWebApi, str]
) -> None:
    standin, url = api
    async with oauth_bot(
        local_store, runtime(local_store, effects), standin, url, rotating=True
    ) as bot:
        assert standin.oauth_app is not None
        standin.oauth_app.expires_in = 600  # due for rotation at once (120 minutes ahead)
        await bot.install()
        installed = decode(local_store.find_installation(f"-:{TEAM}") or "")
        assert installed.bot_refresh_token and installed.bot_token_expires_at
        standin.oauth_app.expires_in = 43_200  # the rotated token lasts

        top = await bot.mention(ALICE, "hello")
        [answer] = await bot.bot_replies(top.ts, 1)
        assert answer.text == "echo: hello"
        rotations = [
            c
            for c in standin.called("oauth.v2.access")
            if c.args.get("grant_type") == "refresh_token"
        ]
        assert rotations, "the expiring token was not rotated"
        rotated = decode(local_store.find_installation(f"-:{TEAM}") or "")
        assert rotated.bot_token != installed.bot_token
        assert rotated.bot_token == standin.token_of(TEAM)
        assert {c.team for c in calls_to(standin, CHANNEL)} == {TEAM}
        assert refusals(standin) == []

        # A re-install asking for one more scope: the latest installation wins.
        await bot.install(scopes=",".join([*BOT_SCOPES, "users:read"]))
        reinstalled = decode(local_store.find_installation(f"-:{TEAM}") or "")
        assert "users:read" in (reinstalled.bot_scopes or [])
        await bot.reply(ALICE, "after the re-install", top.ts)
        replies = await bot.bot_replies(top.ts, 2)
        assert replies[-1].text == "echo: after the re-install"

        # The workspace revokes the bot's token: it is as good as uninstalled.
        paused = await bot.mention(BOB, "email Ana please")
        await bot.bot_replies(paused.ts, 1)
        await bot.settled(paused.ts, Status.AWAITING_APPROVAL)
        standin.uninstall(TEAM)
        before = len(standin.calls)
        revoked = {"type": "tokens_revoked", "tokens": {"oauth": [], "bot": [standin.bot_user]}}
        assert await bot.send_event(revoked) == 200
        assert local_store.find_installation(f"-:{TEAM}") is None
        await bot.settled(paused.ts, Status.DISCARDED)
        late = await bot.mention(ALICE, "anyone?")
        assert bot.record(late.ts) is None
        assert [c for c in standin.calls[before:] if c.team == TEAM or ":" in c.method] == []
    assert effects.calls("send_email") == []


async def test_a_request_whose_installation_cannot_be_read_fails_for_slack_to_send_again(
    store: Store, effects: SideEffects, api: tuple[SlackWebApi, str]
) -> None:
    """Storage that cannot be read is not "not installed": bolt's authorization answered
    such a request "your installation with this app is no longer available" with a 200,
    and Slack never sent it again (a stop lost in the chaos soak, aws seed 620241). Now
    it fails with a 500, and Slack's retry is served."""
    if not isinstance(store, AwsStore):
        pytest.skip("a local read does not fail while the store is up (sqlite's WAL)")
    standin, url = api
    async with oauth_bot(store, runtime(store, effects), standin, url) as bot:
        await bot.install()
        top = await bot.mention(ALICE, "hello")
        await bot.bot_replies(top.ts, 1)
        message = standin.add_user_message(CHANNEL, ALICE, "again", top.ts)
        event = requests.message(
            user=ALICE, text="again", ts=message.ts, channel=CHANNEL, thread_ts=top.ts, team=TEAM
        )
        with failing_reads(store, "INSTALL#"):
            assert await bot.send_event(event, event_id="EvAgain") == 500
        assert await bot.send_event(event, event_id="EvAgain", retry=1) == 200
        replies = await bot.bot_replies(top.ts, 2)
        assert replies[-1].text == "echo: again"
        assert not [c for c in standin.calls if "no longer available" in json.dumps(c.args)]
