"""Thread permalinks: parsing what people paste into `/resume`, and making links."""

from __future__ import annotations

import pytest

from bot.permalink import NOT_A_THREAD_LINK, PermalinkError, linker, parse_permalink, permalink
from storage import ConversationKey

KEY = ConversationKey(team="T1", channel="C0123", thread_ts="1700000000.000100")


@pytest.mark.parametrize(
    "text",
    [
        "https://acme.slack.com/archives/C0123/p1700000000000100",
        "http://acme.slack.com/archives/C0123/p1700000000000100",
        "https://slack.com/archives/C0123/p1700000000000100",
        "<https://acme.slack.com/archives/C0123/p1700000000000100>",
        "<https://acme.slack.com/archives/C0123/p1700000000000100|the thread>",
        "  https://acme.slack.com/archives/C0123/p1700000000000100  ",
    ],
)
def test_a_thread_link_names_its_conversation(text: str) -> None:
    assert parse_permalink(text, "T1") == KEY


def test_a_reply_link_names_its_thread() -> None:
    reply = "https://acme.slack.com/archives/C0123/p1700000099000200?thread_ts=1700000000.000100&cid=C0123"
    assert parse_permalink(reply, "T1") == KEY


def test_the_team_is_the_callers() -> None:
    link = "https://other.slack.com/archives/C0123/p1700000000000100"
    assert parse_permalink(link, "T9").team == "T9"


@pytest.mark.parametrize(
    "text",
    [
        "not a link",
        "",
        "https://example.com/archives/C0123/p1700000000000100",
        "https://acme.slack.com.evil.example/archives/C0123/p1700000000000100",
        "https://evil.example/archives/C0123/p1700000000000100?x=.slack.com",
        "ftp://acme.slack.com/archives/C0123/p1700000000000100",
        "https://acme.slack.com/archives/c0123/p1700000000000100",  # not a channel id
        "https://acme.slack.com/archives/C0123/p123456",  # too few digits
        "https://acme.slack.com/archives/C0123",
        "https://acme.slack.com/messages/C0123/p1700000000000100",
    ],
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(PermalinkError, match="not a thread link"):
        parse_permalink(text, "T1")


ARABIC_INDIC = "".join(chr(0x0660 + int(d)) for d in "1700000000000100")
FULLWIDTH = "".join(chr(0xFF10 + int(d)) for d in "1700000000000100")


@pytest.mark.parametrize(
    "link",
    [
        "https://acme.slack.com/archives/C0123/p1700000000000100?thread_ts=../x",
        "https://acme.slack.com/archives/C0123/p1700000000000100?thread_ts=abc",
        f"https://acme.slack.com/archives/C0123/p1700000000000100?thread_ts={FULLWIDTH[:10]}.1",
        f"https://acme.slack.com/archives/C0123/p{ARABIC_INDIC}",
        f"https://acme.slack.com/archives/C0123/p{FULLWIDTH}",
        "https://acme.slack.com/archives/C0123/p" + "1" * 5000,
    ],
)
def test_a_malformed_timestamp_is_refused_in_plain_words(link: str) -> None:
    """Python's `\\d` takes Arabic-Indic and fullwidth digits; a Slack timestamp has none.
    Every malformed link gets the same plain sentence, which does not echo it."""
    with pytest.raises(PermalinkError) as refused:
        parse_permalink(link, "T1")
    assert str(refused.value) == NOT_A_THREAD_LINK


def test_a_team_that_could_not_be_a_key_is_refused_plainly() -> None:
    with pytest.raises(PermalinkError):
        parse_permalink("https://acme.slack.com/archives/C0123/p1700000000000100", "T:1")


def test_permalink_and_linker() -> None:
    assert permalink(KEY) == "https://slack.com/archives/C0123/p1700000000000100"
    workspace = "https://acme.slack.com/"
    assert permalink(KEY, workspace) == "https://acme.slack.com/archives/C0123/p1700000000000100"
    assert linker(workspace)(KEY) == permalink(KEY, workspace)
    assert parse_permalink(linker(workspace)(KEY), KEY.team) == KEY


def test_a_link_in_an_enterprise_workspace_names_the_enterprise() -> None:
    link = "https://acme.enterprise.slack.com/archives/C0123/p1700000000000100"
    key = parse_permalink(link, "T1", "E1")
    assert key == KEY.model_copy(update={"enterprise": "E1"})
    assert str(key) == "E1:T1:C0123:1700000000.000100"
    assert parse_permalink(permalink(key), "T1", "E1") == key
