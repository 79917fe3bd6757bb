"""The app manifest asks for exactly what the code uses: scopes, events, commands."""

from __future__ import annotations

import re

import yaml

from bot.slackapp.oauth import BOT_SCOPES
from bot.slackapp.settings import SlackSettings
from testkit.services import ROOT

MANIFEST = yaml.safe_load((ROOT / "slack-app-manifest.yaml").read_text())

# Web API methods -> the bot scope each needs (api.slack.com/methods).
METHOD_SCOPES = {
    "chat_postMessage": "chat:write",
    "chat_update": "chat:write",
    "chat_postEphemeral": "chat:write",
    "chat_delete": "chat:write",
    "chat_startStream": "chat:write",
    "chat_appendStream": "chat:write",
    "chat_stopStream": "chat:write",
    "assistant_threads_setStatus": "assistant:write",
    "assistant_threads_setSuggestedPrompts": "assistant:write",
    "assistant_threads_setTitle": "assistant:write",
    "agents_sessions_setStatus": "chat:write",  # for an app declared as an agent
    "views_publish": None,  # the app's own Home tab: no scope
    "reactions_add": "reactions:write",
    "reactions_remove": "reactions:write",
    "conversations_replies": "channels:history",  # and groups:, im:, mpim:history by type
    "users_info": "users:read",
    "auth_test": None,
    "apps_connections_open": None,  # uses the app-level token, not a bot scope
}
EVENT_SCOPES = {
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.im": "im:history",
    "message.mpim": "mpim:history",
    "app_home_opened": None,
    "app_context_changed": "assistant:write",  # the agent experience's
    "agent_session_stopped": None,  # sessions need chat:write, which the bot has
    "assistant_thread_started": "assistant:write",
    "assistant_thread_context_changed": "assistant:write",
    "app_uninstalled": None,  # no scope: sent to every app
    "tokens_revoked": None,
}


def methods_called() -> set[str]:
    source = "\n".join(p.read_text() for p in (ROOT / "bot").rglob("*.py"))
    return set(re.findall(r"client\.([a-z]+(?:_[A-Za-z]+)+)\(", source))


def downloads_files() -> bool:
    source = (ROOT / "bot" / "slackapp" / "conversation_source.py").read_text()
    return "url_private" in source and "Authorization" in source


def test_scopes_match_the_methods_and_events() -> None:
    called = methods_called()
    assert called <= set(METHOD_SCOPES), f"add a scope mapping for {called - set(METHOD_SCOPES)}"
    needed = {METHOD_SCOPES[m] for m in called} - {None}
    if downloads_files():
        needed.add("files:read")  # url_private downloads with the bot token
    needed |= {EVENT_SCOPES[e] for e in MANIFEST["settings"]["event_subscriptions"]["bot_events"]}
    needed.add("commands")
    needed.discard(None)
    assert set(MANIFEST["oauth_config"]["scopes"]["bot"]) == needed
    # The OAuth install asks for the same scopes as the manifest.
    assert set(BOT_SCOPES) == needed


def test_events_are_the_ones_listened_to() -> None:
    names = ("listeners.py", "container.py", "home.py", "uninstall.py")
    source = "".join((ROOT / "bot" / "slackapp" / name).read_text() for name in names)
    listened = set(re.findall(r'app\.event\("([a-z_]+)"\)', source))
    events = MANIFEST["settings"]["event_subscriptions"]["bot_events"]
    assert {e.split(".")[0] for e in events} == listened


def test_commands_and_urls() -> None:
    commands = {c["command"] for c in MANIFEST["features"]["slash_commands"]}
    assert commands == {
        SlackSettings.model_fields["resume_command"].default,
        SlackSettings.model_fields["admin_command"].default,
    }
    urls = [c["url"] for c in MANIFEST["features"]["slash_commands"]]
    urls += [
        MANIFEST["settings"]["event_subscriptions"]["request_url"],
        MANIFEST["settings"]["interactivity"]["request_url"],
    ]
    assert all(url.endswith("/slack/events") for url in urls)
    assert MANIFEST["oauth_config"]["redirect_urls"] == ["https://YOUR-HOST/slack/oauth_redirect"]
    assert MANIFEST["settings"]["interactivity"]["is_enabled"] is True


def test_the_agent_container_and_home_are_declared() -> None:
    features = MANIFEST["features"]
    assert "agent_view" in features and "assistant_view" not in features
    assert features["agent_view"]["agent_description"]
    assert features["app_home"]["home_tab_enabled"] is True
    assert features["app_home"]["messages_tab_enabled"] is True
    assert MANIFEST["settings"]["org_deploy_enabled"] is True
