"""The bodies Slack sends to an app: events as JSON, slash commands form-encoded, button
clicks as `payload=<json>` (on a message, or on the Home tab's view); signed like Slack signs
them; and the events inside them (mentions, channel and thread messages, direct messages,
the agent's container and sessions). Shared by local mode's stand-in
and the tests, so both speak to the bot exactly alike."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from typing import Any
from urllib.parse import urlencode

APP_ID = "A0STANDIN"
FORM = "application/x-www-form-urlencoded"


def signed_headers(body: str, secret: str, *, timestamp: int | None = None) -> dict[str, str]:
    """`X-Slack-Signature`: v0 HMAC-SHA256 of `v0:{timestamp}:{body}`."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{stamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


def app_mention(
    *, user: str, text: str, ts: str, channel: str, thread_ts: str | None = None, team: str = ""
) -> dict[str, Any]:
    """The event for a message that mentions the app (`thread_ts` when in a thread)."""
    event: dict[str, Any] = {
        "type": "app_mention",
        "user": user,
        "text": text,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    if team:
        event["team"] = team
    return event


def message(
    *,
    channel: str,
    ts: str,
    user: str | None = None,
    text: str | None = None,
    thread_ts: str | None = None,
    team: str = "",
    channel_type: str = "channel",
    **fields: Any,
) -> dict[str, Any]:
    """A `message` event: in a channel (a reply in a thread with `thread_ts`), or a direct
    message (see `direct_message`). `fields` adds what a variant carries (`subtype`,
    `bot_id`, ...); a message without a `user` or a `text` (an edit, say) leaves it out."""
    event: dict[str, Any] = {"type": "message", "channel_type": channel_type}
    if user is not None:
        event["user"] = user
    if text is not None:
        event["text"] = text
    event |= {"ts": ts, "channel": channel, "event_ts": ts}
    if thread_ts:
        event["thread_ts"] = thread_ts
    if team:
        event["team"] = team
    return event | fields


def direct_message(
    *, user: str, text: str, ts: str, channel: str, team: str = ""
) -> dict[str, Any]:
    """A message to the app in a direct message channel (`D...`)."""
    return message(user=user, text=text, ts=ts, channel=channel, team=team, channel_type="im")


def app_home_opened(*, user: str, channel: str, tab: str) -> dict[str, Any]:
    """A person opens the app: its Messages tab (`messages`: the agent's DM, in the agent
    experience) or its Home tab (`home`)."""
    stamp = f"{time.time():.6f}"
    return {
        "type": "app_home_opened",
        "user": user,
        "channel": channel,
        "tab": tab,
        "event_ts": stamp,
    }


def app_context_changed(
    *, user: str, channel: str, entities: list[dict[str, Any]]
) -> dict[str, Any]:
    """What a person views beside the agent's container changed (`entities`, most relevant
    first, e.g. `{"type": "slack#/types/channel_id", "value": "C1", "team_id": "T1"}`)."""
    return {
        "type": "app_context_changed",
        "user": user,
        "channel": channel,
        "context": {"entities": entities} if entities else {},
        "event_ts": f"{time.time():.6f}",
    }


def assistant_thread(
    kind: str, *, user: str, channel: str, thread_ts: str, viewing: str | None = None
) -> dict[str, Any]:
    """The older assistant experience's `assistant_thread_started` or
    `assistant_thread_context_changed` (`kind`): a thread of the assistant's DM, opened
    beside channel `viewing`."""
    context: dict[str, Any] = {"channel_id": viewing} if viewing else {}
    return {
        "type": kind,
        "assistant_thread": {
            "user_id": user,
            "context": context,
            "channel_id": channel,
            "thread_ts": thread_ts,
        },
        "event_ts": f"{time.time():.6f}",
    }


def agent_session_stopped(
    *, user: str, channel: str, thread_ts: str, streams: list[str]
) -> dict[str, Any]:
    """Someone pressed Slack's own stop on the thread's agent session (`streams`: the
    streaming messages Slack ended)."""
    return {
        "type": "agent_session_stopped",
        "channel": channel,
        "thread_ts": thread_ts,
        "user": user,
        "streaming_message_ts": streams,
        "event_ts": f"{time.time():.6f}",
    }


def event_callback(
    team: str,
    event: dict[str, Any],
    event_id: str | None = None,
    *,
    enterprise: str | None = None,
    org_wide: bool = False,
) -> str:
    """An event for the app, from a workspace (of an Enterprise Grid organisation, where
    the app may be installed org-wide)."""
    body: dict[str, Any] = {
        "token": "standin",
        "team_id": team,
        "api_app_id": APP_ID,
        "type": "event_callback",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:12]}",
        "event_time": int(time.time()),
        "event": event,
    }
    if enterprise:
        body["enterprise_id"] = enterprise
        body["authorizations"] = [
            {
                "enterprise_id": enterprise,
                "team_id": None if org_wide else team,
                "user_id": "UBOT",
                "is_bot": True,
                "is_enterprise_install": org_wide,
            }
        ]
        body["is_ext_shared_channel"] = False
    return json.dumps(body)


def org(enterprise: str | None, org_wide: bool) -> dict[str, Any]:
    """What interactivity payloads and commands say of an Enterprise Grid workspace."""
    return {"enterprise": enterprise, "org_wide": org_wide} if enterprise else {}


def block_actions(
    *,
    team: str,
    user: str,
    channel: str,
    message: dict[str, Any],
    action_id: str,
    value: str,
    response_url: str,
    block_id: str = "b",
    action_type: str = "button",
    thread_ts: str | None = None,
    ephemeral: bool = False,
    enterprise: str | None = None,
    org_wide: bool = False,
) -> str:
    """A click on an element (a `button`, a `feedback_buttons` thumb) of `message` (`ts`,
    `text`, `blocks`), form-encoded. A click on an ephemeral message says so in its
    container and carries no `message`, as Slack sends it."""
    container: dict[str, Any] = {
        "type": "message",
        "message_ts": message["ts"],
        "channel_id": channel,
        "is_ephemeral": ephemeral,
    }
    if thread_ts:
        container["thread_ts"] = thread_ts
    payload: dict[str, Any] = {
        "type": "block_actions",
        "team": {"id": team},
        "user": {"id": user},
        "api_app_id": APP_ID,
        "trigger_id": uuid.uuid4().hex,
        "container": container,
        "channel": {"id": channel},
        "response_url": response_url,
        "actions": [
            {
                "action_id": action_id,
                "block_id": block_id,
                "type": action_type,
                "value": value,
                "action_ts": str(time.time()),
            }
        ],
    }
    if not ephemeral:
        payload["message"] = message
    if enterprise:
        payload["enterprise"] = {"id": enterprise, "name": enterprise}
        payload["is_enterprise_install"] = org_wide
        payload["user"]["team_id"] = team
    return urlencode({"payload": json.dumps(payload)})


def view_actions(
    *,
    team: str,
    user: str,
    view: dict[str, Any],
    action_id: str,
    value: str,
    block_id: str = "b",
    enterprise: str | None = None,
    org_wide: bool = False,
) -> str:
    """A click on a button of a view (the Home tab), form-encoded: its container is the
    view; there is no message, no channel and no response_url."""
    payload: dict[str, Any] = {
        "type": "block_actions",
        "team": {"id": team},
        "user": {"id": user, "team_id": team},
        "api_app_id": APP_ID,
        "trigger_id": uuid.uuid4().hex,
        "container": {"type": "view", "view_id": view.get("id", "V0HOME")},
        "view": {"id": view.get("id", "V0HOME"), "type": "home", "blocks": view["blocks"]},
        "actions": [
            {
                "action_id": action_id,
                "block_id": block_id,
                "type": "button",
                "value": value,
                "action_ts": str(time.time()),
            }
        ],
    }
    if enterprise:
        payload["enterprise"] = {"id": enterprise, "name": enterprise}
        payload["is_enterprise_install"] = org_wide
    return urlencode({"payload": json.dumps(payload)})


def slash_command(
    *,
    team: str,
    channel: str,
    user: str,
    command: str,
    text: str,
    response_url: str,
    enterprise: str | None = None,
    org_wide: bool = False,
) -> str:
    fields = {
        "token": "standin",
        "team_id": team,
        "channel_id": channel,
        "user_id": user,
        "command": command,
        "text": text,
        "api_app_id": APP_ID,
        "trigger_id": uuid.uuid4().hex,
        "response_url": response_url,
    }
    if enterprise:
        fields |= {"enterprise_id": enterprise, "is_enterprise_install": str(org_wide).lower()}
    return urlencode(fields)
