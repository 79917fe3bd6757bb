"""`python -m bot admin ...`: the same operations as the slash command, for operators."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from slack_sdk.oauth.installation_store import Installation

from bot.runtime import ApprovalRequest, ConversationRuntime
from bot.slackapp.installations import encode, install_id
from bot.standin.oauth import Grant
from bot.standin.slack_api import SlackWebApi
from storage import ConversationKey, Status
from storage.local import LocalStore
from testkit.runtime import SideEffects, build_agent, email_then_answer, record_of
from testkit.slack import CHANNEL, TEAM, running_api, thread_key


async def run_cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "admin",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode()


async def test_cli_lists_and_discards_and_notifies_the_thread(
    local_store: LocalStore, effects: SideEffects, tmp_path: Path
) -> None:
    store = local_store
    key = thread_key("1700000000.000100")
    runtime = ConversationRuntime(store, build_agent(email_then_answer(), effects))
    [request] = await runtime.handle_message(key, event_id="E1", user="UALICE", text="email Ana")
    assert isinstance(request, ApprovalRequest)

    api = SlackWebApi(team=TEAM)
    async with running_api(api) as api_url:
        env = {
            **os.environ,
            "BOT_DATA_DIR": str(tmp_path / "data"),
            "BOT_STORAGE": "local",
            "SLACK_BOT_TOKEN": "xoxb-test",
            "SLACK_API_URL": f"{api_url}/api/",
        }
        code, out = await run_cli(env, "list", "stale", "--older-than", "0s")
        assert code == 0 and str(key) in out
        code, out = await run_cli(env, "discard", "stale", "--older-than", "0s", "--dry-run")
        assert code == 0 and "would discard 1" in out
        assert record_of(store, key).status is Status.AWAITING_APPROVAL

        link = f"https://acme.slack.com/archives/{CHANNEL}/p1700000000000100"
        code, out = await run_cli(env, "discard", link)
        assert code == 0, out
        assert "removed its checkpoint" in out and "send_email" in out
    assert record_of(store, key).status is Status.DISCARDED
    [notice] = api.bot_replies(CHANNEL, key.thread_ts)
    assert "discarded" in notice.text and "send_email" in notice.text
    assert len(api.called("auth.test")) >= 1  # the team id came from the token


async def test_cli_refuses_a_bad_target(tmp_path: Path) -> None:
    env = {**os.environ, "BOT_DATA_DIR": str(tmp_path / "data"), "BOT_STORAGE": "local"}
    env.pop("SLACK_BOT_TOKEN", None)
    code, out = await run_cli(env, "discard", "https://example.com/nothing")
    assert code == 2 and "not a thread link" in out


async def test_cli_with_many_workspaces_notifies_with_the_workspace_token(
    local_store: LocalStore, effects: SideEffects, tmp_path: Path
) -> None:
    """SLACK_CLIENT_ID and SLACK_CLIENT_SECRET: the notice goes with the token kept in the
    installation of the conversation's workspace (of its organisation)."""
    store = local_store
    key = ConversationKey(
        enterprise="E0ACME", team="T0ACME", channel="C0ACME", thread_ts="1700000000.000200"
    )
    runtime = ConversationRuntime(store, build_agent(email_then_answer(), effects))
    [request] = await runtime.handle_message(key, event_id="E2", user="UBOB", text="email Ana")
    assert isinstance(request, ApprovalRequest)
    api = SlackWebApi(team=TEAM)
    api.add_team("T0ACME", "Acme Sales", enterprise="E0ACME", channels=("C0ACME",))
    api.tokens["xoxb-acme"] = Grant("T0ACME", "chat:write", "UBOB")
    installation = Installation(
        app_id="A1",
        enterprise_id="E0ACME",
        team_id="T0ACME",
        user_id="UBOB",
        bot_token="xoxb-acme",
        bot_id="BBOT",
        bot_user_id="UBOT",
        bot_scopes=["chat:write"],
    )
    store.save_installation(install_id("E0ACME", "T0ACME"), encode(installation))

    async with running_api(api) as api_url:
        env = {
            **os.environ,
            "BOT_DATA_DIR": str(tmp_path / "data"),
            "BOT_STORAGE": "local",
            "SLACK_CLIENT_ID": "1234.5678",
            "SLACK_CLIENT_SECRET": "secret",
            "SLACK_API_URL": f"{api_url}/api/",
        }
        env.pop("SLACK_BOT_TOKEN", None)
        code, out = await run_cli(env, "discard", str(key))
        assert code == 0, out
    assert record_of(store, key).status is Status.DISCARDED
    [notice] = api.bot_replies("C0ACME", key.thread_ts)
    assert "discarded" in notice.text
    posts = api.called("chat.postMessage")
    assert posts and {call.team for call in posts} == {"T0ACME"}
    assert [c.method for c in api.calls if ":" in c.method] == []
