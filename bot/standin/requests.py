"""The bodies Slack sends to an app: events as JSON, slash commands form-encoded, button
clicks as `payload=<json>`; signed like Slack signs them. Shared by local mode's stand-in
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


def event_callback(team: str, event: dict[str, Any], event_id: str | None = None) -> str:
    return json.dumps(
        {
            "token": "standin",
            "team_id": team,
            "api_app_id": APP_ID,
            "type": "event_callback",
            "event_id": event_id or f"Ev{uuid.uuid4().hex[:12]}",
            "event_time": int(time.time()),
            "event": event,
        }
    )


def block_actions(
    *,
    team: str,
    user: str,
    channel: str,
    message: dict[str, Any],
    action_id: str,
    value: str,
    response_url: str,
) -> str:
    """A button click on `message` (`ts`, `text`, `blocks`), form-encoded."""
    payload = {
        "type": "block_actions",
        "team": {"id": team},
        "user": {"id": user},
        "api_app_id": APP_ID,
        "trigger_id": uuid.uuid4().hex,
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": channel},
        "channel": {"id": channel},
        "message": message,
        "response_url": response_url,
        "actions": [
            {
                "action_id": action_id,
                "block_id": "b",
                "type": "button",
                "value": value,
                "action_ts": str(time.time()),
            }
        ],
    }
    return urlencode({"payload": json.dumps(payload)})


def slash_command(
    *, team: str, channel: str, user: str, command: str, text: str, response_url: str
) -> str:
    return urlencode(
        {
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
    )
