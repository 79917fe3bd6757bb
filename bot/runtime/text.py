"""Text from outside (Slack users, the model) made safe to store."""

from __future__ import annotations

import re
from collections.abc import Sequence

# In a Python string every surrogate is unpaired: JSON's escaped pairs become one character.
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """Unpaired surrogates (what `json.loads` makes of a broken `\\ud83d` escape) cannot be
    encoded as UTF-8: replace them with U+FFFD, so that the message is kept, not dropped."""
    return _SURROGATE.sub("\ufffd", text)


def quote(text: str, limit: int = 120) -> str:
    """A short quote of someone's message, on one line (to name it in a notice); a message
    without text (files only) is named as such, never as an empty quote."""
    flat = " ".join(text.split())
    if not flat:
        return "(a message without text)"
    cut = flat if len(flat) <= limit else flat[: limit - 1] + "…"
    return f"“{cut}”"


def quoted_then_counted(quotes: Sequence[str], total: int, limit: int) -> list[str]:
    """A notice's details naming messages: the first `limit` quotes, then how many more of
    the `total` it is about ("… and 27 more")."""
    shown = list(quotes[:limit])
    rest = total - len(shown)
    return shown + ([f"… and {rest} more"] if rest > 0 else [])
