"""Text from outside (Slack users, the model) made safe to store."""

from __future__ import annotations


def clean_text(text: str) -> str:
    """Unpaired surrogates (what `json.loads` makes of a broken `\\ud83d` escape) cannot be
    encoded as UTF-8: replace them, so that the message is kept rather than dropped."""
    return text.encode("utf-8", "replace").decode("utf-8")
