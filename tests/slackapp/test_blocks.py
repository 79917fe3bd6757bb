"""Block Kit messages (`bot.slackapp.blocks`): button values, approval and decision cards."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.runtime import ApprovalRequest, Decided, PendingCall
from bot.slackapp.agent_blocks import feedback_blocks, parse_feedback, stop_blocks
from bot.slackapp.blocks import (
    APPROVE,
    ARGUMENTS_LIMIT,
    REJECT,
    approval_blocks,
    button_value,
    decided_blocks,
    decision_text,
    mentions,
    parse_button_value,
    shows_decision,
)
from storage import ConversationKey, Verdict

KEY = ConversationKey(team="T1", channel="C1", thread_ts="1700000000.000100")
EVIL = "<!channel> <@U0BOSS> <https://evil.example|safe> & co"


def texts(blocks: list[dict[str, Any]]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def request(call: PendingCall, approvers: list[str] | None = None) -> ApprovalRequest:
    return ApprovalRequest(
        key=KEY, calls=[call], checkpoint_version=3, requested_by="U1", approvers=approvers or []
    )


def test_a_button_value_round_trips_and_is_compact() -> None:
    value = button_value(KEY, "call-1", 3)
    assert " " not in value
    assert parse_button_value(value) == (KEY, "call-1", 3)


def test_every_button_carries_an_enterprise_key_whole() -> None:
    """Approval, feedback, Stop and Resume buttons name their conversation by its key, in
    the four-part form in an Enterprise Grid workspace."""
    grid = KEY.model_copy(update={"enterprise": "E1"})
    assert parse_button_value(button_value(grid, "call-1", 3)) == (grid, "call-1", 3)
    [context] = feedback_blocks(grid, "3.0")
    thumbs = context["elements"][0]
    assert parse_feedback(thumbs["positive_button"]["value"]) == (grid, "3.0", Verdict.GOOD)
    stop = stop_blocks(grid)[1]["elements"][0]["value"]
    assert ConversationKey.parse(stop) == grid
    assert parse_button_value(button_value(KEY, "c", 1))[0].enterprise is None


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("not json", ValueError),
        ("[1, 2]", ValueError),
        ('"a string"', ValueError),
        ('{"c": "call-1", "v": 1}', KeyError),
        ('{"k": "no-colons", "c": "call-1", "v": 1}', ValueError),
        ('{"k": "T1:C1:not-a-ts", "c": "call-1", "v": 1}', ValueError),
        ('{"k": "E1:T1:C1:1.0:2", "c": "call-1", "v": 1}', ValueError),
        ('{"k": "T1:C1:1.0", "c": "call-1", "v": "three"}', ValueError),
        ('{"k": "T1:C1:1.0", "c": "call-1", "v": null}', ValueError),
        # `int()` takes these; a version the bot wrote is a JSON integer.
        ('{"k": "T1:C1:1.0", "c": "call-1", "v": "3"}', ValueError),
        ('{"k": "T1:C1:1.0", "c": "call-1", "v": "\\u0663"}', ValueError),
        ('{"k": "T1:C1:1.0", "c": "call-1", "v": 1.5}', ValueError),
        ('{"k": "T1:C1:1.0", "c": "call-1", "v": true}', ValueError),
    ],
)
def test_a_value_that_is_not_ours_is_refused(value: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        parse_button_value(value)


def test_mentions_name_everyone_who_may_decide() -> None:
    assert mentions([]) == ""
    assert mentions(["U1"]) == "<@U1>"
    assert mentions(["U1", "U2"]) == "<@U1> or <@U2>"
    assert mentions(["U1", "U2", "U3"]) == "<@U1>, <@U2> or <@U3>"


def test_an_approval_card_names_its_deciders_and_carries_the_call() -> None:
    call = PendingCall(call_id="call-1", tool_name="send_email", arguments='{"to": "ana"}')
    blocks = approval_blocks(request(call, approvers=["U7", "U8"]), call)
    assert "<@U1>, <@U7> or <@U8> can decide" in texts(blocks)
    assert "Requested by <@U1>." in texts(blocks)
    [actions] = [b for b in blocks if b["type"] == "actions"]
    assert actions["block_id"] == "approval:call-1"
    assert [e["action_id"] for e in actions["elements"]] == [APPROVE, REJECT]
    assert {e["value"] for e in actions["elements"]} == {button_value(KEY, "call-1", 3)}
    arguments = blocks[1]["text"]["text"]
    assert arguments == '```{\n  "to": "ana"\n}```'  # pretty-printed, in a code block


def test_an_approval_card_escapes_what_came_from_the_model() -> None:
    call = PendingCall(
        call_id="call-1", tool_name=f"tool {EVIL}", arguments=json.dumps({"title": EVIL})
    )
    text = texts(approval_blocks(request(call), call))
    for raw in ("<!channel>", "<@U0BOSS>", "<https://evil"):
        assert raw not in text
    assert "&lt;!channel&gt;" in text
    assert "<@U1>" in text  # the mention the bot means to make


def test_long_or_unparsable_arguments_are_shown_shortened_as_they_are() -> None:
    call = PendingCall(call_id="c", tool_name="t", arguments="not json " * 1000)
    arguments = approval_blocks(request(call), call)[1]["text"]["text"]
    assert arguments.startswith("```not json not json")
    assert len(arguments) <= ARGUMENTS_LIMIT + 6
    assert "chars)" in arguments


def decided(approved: bool, reason: str | None = None) -> Decided:
    return Decided(
        key=KEY,
        call_id="call-1",
        tool_name="send_<email>",
        arguments='{"to": "ana"}',
        approved=approved,
        user="U7",
        reason=reason,
    )


def test_a_decided_card_has_no_buttons_and_says_who_decided() -> None:
    outcome = decided(approved=True)
    blocks = decided_blocks(outcome)
    assert all(b["type"] != "actions" for b in blocks)
    said = ":white_check_mark: `send_&lt;email&gt;` approved by <@U7>"
    assert decision_text(outcome) == said
    assert blocks[0]["text"]["text"] == said
    assert "ana" in blocks[1]["text"]["text"]  # what was approved
    assert shows_decision({"blocks": blocks}, outcome)
    assert not shows_decision({"blocks": blocks}, decided(approved=False))


def test_a_rejection_shows_its_reason_escaped() -> None:
    blocks = decided_blocks(decided(approved=False, reason="not <!here>"))
    verdict = blocks[0]["text"]["text"]
    assert verdict == ":no_entry_sign: `send_&lt;email&gt;` rejected by <@U7>: not &lt;!here&gt;"


def test_a_long_reason_is_cut_to_a_section() -> None:
    outcome = decided(approved=False, reason="no " * 2000)
    [said, _] = decided_blocks(outcome)
    assert len(said["text"]["text"]) <= 3000
    assert shows_decision({"blocks": [{"block_id": "x", **said}]}, outcome)
