"""Text as the stores hold it: UTF-8 (sqlite, DynamoDB, S3), which cannot carry a lone
surrogate, what `json.loads` makes of a broken `\\ud83d` escape in a tool's output, the
model's text or a Slack payload. JSON text keeps one exactly, escaped; plain text gets
U+FFFD in its place. And a stored item that is not JSON is told apart, to be skipped."""

from __future__ import annotations

import json
import re
from typing import Any

# In a Python string every surrogate is unpaired: JSON's escaped pairs decode to one character.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def json_text(document: Any) -> str:
    """`document` as compact JSON text that any UTF-8 store holds and that `json.loads`
    reads back EXACTLY: a lone surrogate (only ever inside a string literal) is written as
    its `\\uXXXX` escape, as `json.dumps` with `ensure_ascii` would, and the rest as it is.
    Exactness matters: the SDK reconciles a pending Session write by comparing digests of
    the items it holds with the items it reads back."""
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    return _LONE_SURROGATE.sub(_escaped, text) if _unencodable(text) else text


def _escaped(found: re.Match[str]) -> str:
    return f"\\u{ord(found.group()):04x}"


def plain_text(text: str) -> str:
    """Text that is not JSON (a tool's output, its arguments as the model wrote them) as
    UTF-8 holds it: a lone surrogate becomes U+FFFD."""
    return _LONE_SURROGATE.sub("\ufffd", text) if _unencodable(text) else text


def _unencodable(text: str) -> bool:
    # Several times faster than the search, which runs only for a text that fails.
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def decodes(text: str) -> bool:
    """Whether a stored item is JSON: one that is not (damaged) is left out of the history
    it belongs to, never a reason for a read to fail."""
    try:
        json.loads(text)
    except (ValueError, TypeError):
        return False
    return True
