"""Who wrote what, as the model reads it: every user message starts with its author in one
stable form, `<@U123> (Display Name): text`, the same in the session history, in messages
held while a run works, and in a thread's earlier messages. The id is what the model may use
to mention someone (`<@U123>`); the name is fetched once (the surface caches it) and written
into the history as it was then. Without a name: `<@U123>: text`.

The header is a help to the model, not an identity check: text can imitate one. Tools that
must know who asked read the run context (`request_context`), never the text."""

from __future__ import annotations

import re
import unicodedata

NAME_LIMIT = 80
_HEADER = re.compile(r"^<@([A-Z0-9]+)>(?: \(([^()\n]*)\))?: ", re.DOTALL)


def author(user: str, name: str | None) -> str:
    """`<@U123> (Name)`, or `<@U123>` without a name."""
    name = clean_name(name)
    return f"<@{user}> ({name})" if name else f"<@{user}>"


def attributed(user: str, name: str | None, text: str) -> str:
    return f"{author(user, name)}: {text}"


def split_author(text: str) -> tuple[str | None, str]:
    """(user id, the message's own text) of an attributed text; (None, text) otherwise."""
    found = _HEADER.match(text)
    if found is None:
        return None, text
    return found.group(1), text[found.end() :]


def clean_name(name: str | None) -> str | None:
    """A name safe inside the header: one line, no parentheses, no control characters,
    at most NAME_LIMIT characters; None when nothing is left."""
    if not name:
        return None
    kept = "".join(
        " " if ch in "()\n\r\t" else ch
        for ch in name
        if ch in "\n\r\t" or unicodedata.category(ch)[0] != "C"
    )
    kept = " ".join(kept.split())[:NAME_LIMIT].strip()
    return kept or None
