"""A workspace removes the app (`app_uninstalled`, or `tokens_revoked` naming the bot): the
removal applies to the installation it was sent for, once. Slack's redelivery of the event
after the workspace installed the app again is a duplicate, and an uninstall first delivered
after a reinstall is older than the installation: neither removes the new installation or
discards what it began. Through bolt's real OAuth flow against the Web API stand-in, signed
requests, on both backends. The answer comes before the slow work (discarding the
workspace's conversations), and a process killed in between finishes it after a restart."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

import pytest
from slack_sdk.oauth.installation_store import Installation

from bot.slackapp.installations import encode
from bot.standin import requests
from bot.standin.slack_api import SlackWebApi
from storage import ConversationKey, Status, Store
from testkit.child_env import child_bot_env
from testkit.deployment import post_signed
from testkit.health import wait_healthy
from testkit.runtime import SideEffects
from testkit.services import free_port, wait_until
from testkit.slack import (
    CHANNEL,
    CLIENT_ID,
    CLIENT_SECRET,
    TEAM,
    Harness,
    oauth_bot,
    running_api,
    thread_key,
)
from testkit.slow_disk import on_slow_disk
from tests.conftest import Backend
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


BUSY = 30  # conversations of the workspace: discarding them takes a while


@pytest.mark.slow
async def test_an_uninstall_acknowledged_then_killed_is_finished_after_a_restart(
    backend: Backend, tmp_path: Path
) -> None:
    """`python -m bot serve` (many workspaces) answers app_uninstalled once its installation
    is deleted and its removal recorded, and is killed (SIGKILL) while it discards the
    workspace's conversations. Started again, it finishes the removal; a conversation the
    workspace began after it (a reinstall) is left alone."""
    store = backend.open()
    installed = Installation(team_id=TEAM, user_id="UADMIN", bot_token="xoxb-1")
    store.save_installation(f"-:{TEAM}", encode(installed))
    busy = [interrupted(store, thread_key(f"1700000000.{n:06d}")) for n in range(BUSY)]
    api = SlackWebApi(team=TEAM)
    log_path = tmp_path / "bot.log"
    async with running_api(api) as api_url:
        port = free_port()
        env = child_bot_env(
            backend.env,
            api_url=api_url,
            bot_token=None,
            port=port,
            SLACK_CLIENT_ID=CLIENT_ID,
            SLACK_CLIENT_SECRET=CLIENT_SECRET,
            BOT_LEASE_SECONDS="2",
        )
        url = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "bot", "serve"]
        with log_path.open("ab") as log:
            # Locally on a slow disk (each fsync 30 ms late), as DynamoDB Local is anyway.
            slow = on_slow_disk(command, 30) if backend.name == "local" else command
            bot = started(slow, env, log)
            try:
                await wait_healthy(url, bot, log_path)
                body = requests.event_callback(TEAM, {"type": "app_uninstalled"}, "EvGONE")
                assert await post_signed(url, body) == 200
            finally:
                os.killpg(bot.pid, signal.SIGKILL)
                await asyncio.to_thread(bot.wait, 30)
            # The answer came before the discards were done: the kill found them under way.
            assert store.find_installation(f"-:{TEAM}") is None
            [removal] = store.pending_removals()
            assert not all(discarded(store, key) for key in busy)
            # The workspace installs the app again and begins a conversation.
            since = interrupted(store, thread_key("1800000000.000001"))
            bot = started(command, env, log)
            try:
                await wait_healthy(url, bot, log_path)
                await asyncio.to_thread(
                    wait_until, lambda: all(discarded(store, key) for key in busy), 60
                )
                await asyncio.to_thread(wait_until, lambda: store.pending_removals() == [], 30)
            finally:
                os.killpg(bot.pid, signal.SIGTERM)
                await asyncio.to_thread(bot.wait, 30)
    assert store.find_removal(removal.removal_id) is not None  # a redelivery: a duplicate
    record = store.get(since)
    assert record is not None and record.status is Status.INTERRUPTED
    assert "Traceback" not in log_path.read_text(errors="replace")


def interrupted(store: Store, key: ConversationKey) -> ConversationKey:
    """A conversation paused in the workspace (a run interrupted, waiting for /resume)."""
    lease, _ = store.acquire(key, "seed")
    store.release(lease, status=Status.INTERRUPTED)
    return key


def discarded(store: Store, key: ConversationKey) -> bool:
    record = store.get(key)
    return record is not None and record.status is Status.DISCARDED


def started(command: list[str], env: dict[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """In a session of its own: a signal to the group reaches the bot (and strace)."""
    return subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
