"""Text for Slack: escaping, truncating, code blocks and splitting (`bot.slackapp.text`)."""

from __future__ import annotations

import pytest

from bot.slackapp.text import MESSAGE_LIMIT, code_block, escape, split_text, truncate


def test_escape_the_three_characters_slack_decodes() -> None:
    assert escape("a & b < c > d") == "a &amp; b &lt; c &gt; d"
    assert escape("<!channel> <@U1>") == "&lt;!channel&gt; &lt;@U1&gt;"
    assert escape("&lt;") == "&amp;lt;"  # text that looks escaped stays literal
    assert escape("plain *bold* `code`") == "plain *bold* `code`"


def test_truncate_keeps_short_text_and_says_how_long_long_text_was() -> None:
    assert truncate("short", 10) == "short"
    assert truncate("x" * 100, 100) == "x" * 100
    cut = truncate("y" * 5000, 100)
    assert len(cut) <= 100
    assert cut == "y" * 80 + "… (5000 chars)"


def test_code_block_is_escaped_and_cannot_be_broken_out_of() -> None:
    assert code_block("a < b", 100) == "```a &lt; b```"
    fenced = code_block("before ``` after", 100)
    assert fenced.startswith("```") and fenced.endswith("```")
    assert "```" not in fenced[3:-3]
    assert code_block("ends with `", 100) == "```ends with `\u200b```"
    assert len(code_block("z" * 5000, 200)) <= 206


def test_split_text_leaves_short_text_whole() -> None:
    assert split_text("hello") == ["hello"]
    assert split_text("") == [""]
    assert split_text("x" * MESSAGE_LIMIT) == ["x" * MESSAGE_LIMIT]


def test_split_text_prefers_line_breaks_then_spaces() -> None:
    assert split_text("a" * 60 + "\n\n" + "b" * 60, limit=100) == ["a" * 60, "b" * 60]
    assert split_text("a" * 60 + "\n" + "b" * 60, limit=100) == ["a" * 60, "b" * 60]
    words = " ".join(["word"] * 60)
    pieces = split_text(words, limit=50)
    assert all(len(p) <= 50 and p == p.strip() for p in pieces)
    assert " ".join(pieces).split() == words.split()


def test_split_text_cuts_hard_when_it_must() -> None:
    assert split_text("x" * 250, limit=100) == ["x" * 100, "x" * 100, "x" * 50]


@pytest.mark.parametrize("limit", [20, 21, 22, 23, 24, 97])
def test_split_text_never_cuts_an_entity_in_two(limit: int) -> None:
    escaped = escape("<" * 200)
    pieces = split_text(escaped, limit=limit)
    assert all(len(p) <= limit for p in pieces)
    assert all(p.endswith(";") for p in pieces)
    assert "".join(pieces) == escaped
