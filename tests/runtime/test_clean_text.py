"""`clean_text` (`bot.runtime.text`): text from outside is kept, never dropped for being
unencodable."""

from __future__ import annotations

import json

import pytest

from bot.runtime.envelope import clean_text


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ('"bad \\ud83d surrogate"', "bad \ufffd surrogate"),  # a lone high surrogate
        ('"\\ude80 first"', "\ufffd first"),  # a lone low surrogate
        ('"\\udc80\\ud800"', "\ufffd\ufffd"),  # in the wrong order: two lone ones
        ('"rocket \\ud83d\\ude80"', "rocket 🚀"),  # a pair is one character: kept
    ],
)
def test_lone_surrogates_become_replacement_characters(raw: str, clean: str) -> None:
    cleaned = clean_text(json.loads(raw))
    assert cleaned == clean
    cleaned.encode("utf-8")  # encodable now


def test_other_text_is_unchanged() -> None:
    text = "héllo ✓ — 日本語 🚀 \x00 \ufffd"
    assert clean_text(text) == text
    assert clean_text("") == ""
