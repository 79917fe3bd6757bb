"""The bodies and events the stand-in and the tests send to the bot
(`bot.standin.requests`), shaped like Slack's."""

from __future__ import annotations

import json
from urllib.parse import parse_qs

from slack_sdk.signature import SignatureVerifier

from bot.standin import requests


def test_app_mention() -> None:
    event = requests.app_mention(user="U1", text="<@UBOT> hi", ts="1.000002", channel="C1")
    assert event == {
        "type": "app_mention",
        "user": "U1",
        "text": "<@UBOT> hi",
        "ts": "1.000002",
        "channel": "C1",
        "event_ts": "1.000002",
    }
    in_thread = requests.app_mention(
        user="U1", text="hi", ts="1.000002", channel="C1", thread_ts="1.000001", team="T1"
    )
    assert (in_thread["thread_ts"], in_thread["team"]) == ("1.000001", "T1")


def test_message_in_a_thread_and_its_variants() -> None:
    reply = requests.message(
        user="U1", text="and then?", ts="1.000003", channel="C1", thread_ts="1.000001"
    )
    assert reply == {
        "type": "message",
        "channel_type": "channel",
        "user": "U1",
        "text": "and then?",
        "ts": "1.000003",
        "channel": "C1",
        "event_ts": "1.000003",
        "thread_ts": "1.000001",
    }
    edit = requests.message(
        channel="C1", ts="1.000004", subtype="message_changed", message={"text": "x"}
    )
    assert "user" not in edit and "text" not in edit and "thread_ts" not in edit
    assert (edit["subtype"], edit["message"]) == ("message_changed", {"text": "x"})


def test_direct_message() -> None:
    event = requests.direct_message(user="U1", text="hi", ts="1.000005", channel="D1", team="T1")
    assert (event["type"], event["channel_type"], event["channel"]) == ("message", "im", "D1")
    assert event["team"] == "T1" and "thread_ts" not in event


def test_event_callback_wraps_the_event() -> None:
    event = requests.app_mention(user="U1", text="hi", ts="1.000002", channel="C1")
    body = json.loads(requests.event_callback("T1", event, "Ev1"))
    assert (body["type"], body["team_id"], body["event_id"]) == ("event_callback", "T1", "Ev1")
    assert body["event"] == event
    first, second = (json.loads(requests.event_callback("T1", event)) for _ in range(2))
    assert first["event_id"].startswith("Ev") and first["event_id"] != second["event_id"]


def test_commands_and_clicks_are_form_encoded_and_signed_like_slack() -> None:
    command = requests.slash_command(
        team="T1", channel="C1", user="U1", command="/resume", text="", response_url="http://x/r"
    )
    assert parse_qs(command)["command"] == ["/resume"]
    click = requests.block_actions(
        team="T1",
        user="U1",
        channel="C1",
        message={"ts": "1.000001", "text": "card", "blocks": []},
        action_id="approval_approve",
        value="v",
        response_url="http://x/r",
    )
    payload = json.loads(parse_qs(click)["payload"][0])
    assert payload["actions"][0]["value"] == "v" and payload["user"] == {"id": "U1"}
    headers = requests.signed_headers(click, "secret")
    assert SignatureVerifier("secret").is_valid_request(click, headers)
    assert not SignatureVerifier("other").is_valid_request(click, headers)
