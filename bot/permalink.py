"""Thread permalinks: `https://<team>.slack.com/archives/<channel>/p<ts without dot>`,
optionally with `?thread_ts=<ts>` (a reply's link names its thread that way).

The one parser of what people paste (`/resume`, `/agent-admin`, `python -m bot admin`): it
accepts ASCII digits only (Python's `\\d` takes any script's digits, which no Slack
timestamp has) and says what is wrong in plain words, the same for every malformed link;
nothing from a validation library reaches the person."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from urllib.parse import parse_qs, urlparse

from pydantic import ValidationError

from storage import ConversationKey

# A message's ts is seconds (at most 12 digits, as the listeners accept) and 6 digits of
# microseconds; the link drops the dot.
_PATH = re.compile(r"/archives/(?P<channel>[A-Z0-9]+)/p(?P<digits>[0-9]{7,18})")
_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,8}")
NOT_A_THREAD_LINK = (
    "That is not a thread link. Copy one from the thread's ⋮ menu (Copy link); it looks "
    "like https://your-team.slack.com/archives/C0123ABCD/p1700000000000100."
)


class PermalinkError(ValueError):
    """A text that names no thread; its message is fit to show to the person who wrote it."""

    def __init__(self) -> None:
        super().__init__(NOT_A_THREAD_LINK)


def parse_permalink(text: str, team: str, enterprise: str | None = None) -> ConversationKey:
    """The conversation a permalink points at, in the caller's workspace (`team`, and its
    Enterprise Grid organisation when there is one). Slack wraps links in `<...>` in
    commands. Raises `PermalinkError` (only) for anything else."""
    link = text.strip().strip("<>").split("|", 1)[0]
    url = urlparse(link)
    match = _PATH.fullmatch(url.path)
    slack = url.netloc == "slack.com" or url.netloc.endswith(".slack.com")
    if url.scheme not in ("http", "https") or not slack or not match:
        raise PermalinkError()
    digits = match["digits"]
    thread_ts = parse_qs(url.query).get("thread_ts", [f"{digits[:-6]}.{digits[-6:]}"])[0]
    if not _TS.fullmatch(thread_ts):
        raise PermalinkError()
    try:
        return ConversationKey(
            team=team, channel=match["channel"], thread_ts=thread_ts, enterprise=enterprise
        )
    except ValidationError:  # the caller's team or enterprise: not something people typed
        raise PermalinkError() from None


def permalink(key: ConversationKey, base_url: str = "https://slack.com/") -> str:
    """The thread's link; `base_url` is the workspace's (`auth.test`'s `url`)."""
    digits = key.thread_ts.replace(".", "")
    return f"{base_url.rstrip('/')}/archives/{key.channel}/p{digits}"


def linker(base_url: str) -> Callable[[ConversationKey], str]:
    return functools.partial(permalink, base_url=base_url)
