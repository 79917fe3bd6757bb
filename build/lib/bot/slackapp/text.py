"""Text for Slack: escaping what came from the model, a tool or a user, and splitting long
answers below Slack's limits.

Slack's mrkdwn gives `<...>` meaning (`<!channel>`, `<@U123>`, `<https://x|label>`) and
decodes `&amp;`, `&lt;`, `&gt;`. Escaping those three characters in text from outside means
it can never broadcast, mention someone the bot did not mean to, or disguise a link;
formatting the bot adds itself (bold, code, mentions of known users) is added around it."""

from __future__ import annotations

MESSAGE_LIMIT = 3900  # below the 4,000 characters Slack shows in full (40,000 is the cap)


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 20] + f"… ({len(text)} chars)"


def code_block(text: str, limit: int) -> str:
    """`text` (escaped) in a code block that it cannot break out of."""
    body = truncate(escape(text).replace("```", "`\u200b``"), limit)
    if body.endswith("`"):
        body += "\u200b"
    return f"```{body}```"


def split_text(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """Split on paragraph, then line, then word, then hard boundaries; each piece within
    `limit`, never cutting an escape sequence (`&lt;`) in two."""
    pieces: list[str] = []
    rest = text
    while len(rest) > limit:
        cut = max(rest.rfind("\n\n", 0, limit), rest.rfind("\n", 0, limit))
        if cut <= limit // 2:
            cut = rest.rfind(" ", 0, limit)
        if cut <= limit // 2:
            cut = limit
            amp = rest.rfind("&", max(cut - 5, 0), cut)
            if amp != -1 and ";" not in rest[amp:cut]:
                cut = amp
        pieces.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip("\n ")
    pieces.append(rest)
    return [piece for piece in pieces if piece] or [""]
