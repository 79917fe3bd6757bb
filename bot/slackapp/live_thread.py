"""What `live` holds of one thread this process works on: its streamed reply, how its work
is shown (Slack's agent session, or the status line and Stop control where sessions are
refused), and the timers that go with it. Nothing here is stored."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.models.messages.chunk import TaskUpdateChunk
from slack_sdk.web.async_client import AsyncWebClient

from bot.slackapp.markdown import MarkdownEscaper
from storage import ConversationKey

ERRORS = (SlackApiError, aiohttp.ClientError, TimeoutError, OSError)


def error_of(exc: BaseException) -> str:
    """Slack's error code, the HTTP status, or the exception's kind, for a log line."""
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error") or exc.response.status_code)
    return type(exc).__name__


@dataclass
class Stream:
    """One streamed reply in a thread."""

    ts: str | None = None
    text: str = ""  # safe Markdown not sent yet
    tasks: dict[str, TaskUpdateChunk] = field(default_factory=dict)  # updates not sent yet
    sent: int = 0  # characters of Markdown sent
    tail: str = ""  # what the model wrote since its last tool call: the answer, if it ends
    whole: bool = True  # every character the model wrote is in the stream
    broken: bool = False  # Slack refused or ended it: nothing more goes in
    done: bool = False  # closed (as the answer, or as a preview)
    overtaken: bool = False  # something was posted below it: the answer goes below that
    escaper: MarkdownEscaper = field(default_factory=MarkdownEscaper)


class LiveThread:
    def __init__(self, key: ConversationKey, requester: str | None, client: AsyncWebClient) -> None:
        self.key = key
        self.client = client  # the workspace's
        self.requester = requester
        self.stream = Stream()
        self.lock = asyncio.Lock()  # one Slack call at a time per thread, in order
        self.session = False  # Slack's agent session shows the work (else the status line)
        self.waiting = False  # a call waits for a person: the session is suspended after
        self.settled = False  # the answer's stream closed the session (`chat.stopStream`)
        self.status = ""
        self.reacted = False
        self.flusher: asyncio.Task[None] | None = None
        self.timers: list[asyncio.Task[None]] = []
