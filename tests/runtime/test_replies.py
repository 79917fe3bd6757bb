"""`parse_decision`: which plain replies decide a pending approval."""

from __future__ import annotations

import pytest

from bot.runtime.approvals import parse_decision


@pytest.mark.parametrize(
    "text",
    ["approve", "Approved", "YES", "y", "ok", "Okay!", "go ahead", "lgtm", "  yes.  ", "yes!!"],
)
def test_approving_words(text: str) -> None:
    assert parse_decision(text) is True


@pytest.mark.parametrize(
    "text", ["reject", "Rejected.", "no", "N", "deny", "denied", "cancel", "stop", "no,"]
)
def test_rejecting_words(text: str) -> None:
    assert parse_decision(text) is False


def test_a_mention_of_the_bot_before_the_word_is_ignored() -> None:
    assert parse_decision("<@UBOT> approve") is True
    assert parse_decision("<@U0BOT123>  no.") is False


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "yes please",
        "approve it",
        "no idea what you mean",
        "yes?",  # a question is not a decision
        "maybe",
        "nope",
        "<@UBOT>",
        "approve, but not today",
    ],
)
def test_anything_else_is_not_a_decision(text: str) -> None:
    assert parse_decision(text) is None
