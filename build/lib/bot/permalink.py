"""Thread permalinks: `https://<team>.slack.com/archives/<channel>/p<ts without dot>`,
optionally with `?thread_ts=<ts>` (a reply's link names its thread that way)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from urllib.parse import parse_qs, urlparse

from storage import ConversationKey

_PATH = re.compile(r"^/archives/(?P<channel>[A-Z0-9]+)/p(?P<digits>\d{7,})$")


class PermalinkError(ValueError):
    pass


def parse_permalink(text: str, team: str, enterprise: str | None = None) -> ConversationKey:
    """The conversation a permalink points at, in the caller's workspace (`team`, and its
    Enterprise Grid organisation when there is one). Slack wraps links in `<...>` in
    commands."""
    link = text.strip().strip("<>").split("|", 1)[0]
    url = urlparse(link)
    match = _PATH.match(url.path)
    slack = url.netloc == "slack.com" or url.netloc.endswith(".slack.com")
    if url.scheme not in ("http", "https") or not slack or not match:
        raise PermalinkError(
            f"not a thread link: {text!r} (expected https://<team>.slack.com/archives/<channel>/p<ts>)"
        )
    digits = match["digits"]
    ts = f"{digits[:-6]}.{digits[-6:]}"
    thread_ts = parse_qs(url.query).get("thread_ts", [ts])[0]
    return ConversationKey(
        team=team, channel=match["channel"], thread_ts=thread_ts, enterprise=enterprise
    )


def permalink(key: ConversationKey, base_url: str = "https://slack.com/") -> str:
    """The thread's link; `base_url` is the workspace's (`auth.test`'s `url`)."""
    digits = key.thread_ts.replace(".", "")
    return f"{base_url.rstrip('/')}/archives/{key.channel}/p{digits}"


def linker(base_url: str) -> Callable[[ConversationKey], str]:
    return functools.partial(permalink, base_url=base_url)
