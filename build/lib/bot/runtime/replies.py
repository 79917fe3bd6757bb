"""The rule for a plain reply while a run waits for approval: "approve"/"yes" or
"reject"/"no" (alone, any case, trailing punctuation ignored) from an allowed user decides
every pending call; any other text is kept for the agent and the question is asked again."""

from __future__ import annotations

import re

APPROVE_WORDS = frozenset({"approve", "approved", "yes", "y", "ok", "okay", "go ahead", "lgtm"})
REJECT_WORDS = frozenset({"reject", "rejected", "no", "n", "deny", "denied", "cancel", "stop"})


STOP_WORDS = frozenset({"stop", "stop it", "cancel that", "abort"})


def _words(text: str) -> str:
    words = re.sub(r"<@[A-Z0-9]+>", "", text)  # a leading mention of the bot
    return re.sub(r"[\s.!,:;]+$", "", words.strip()).strip().lower()


def is_stop_word(text: str) -> bool:
    """A reply that asks the run in progress to stop (while nothing runs, it is a message)."""
    return _words(text) in STOP_WORDS


def parse_decision(text: str) -> bool | None:
    """True to approve, False to reject, None when the text is not a decision."""
    words = re.sub(r"<@[A-Z0-9]+>", "", text)  # a leading mention of the bot
    words = re.sub(r"[\s.!,:;]+$", "", words.strip()).strip().lower()
    if words in APPROVE_WORDS:
        return True
    if words in REJECT_WORDS:
        return False
    return None
