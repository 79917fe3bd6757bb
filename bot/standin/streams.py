"""Slack's agent surface in the Web API stand-in: a thread's status line
(`assistant.threads.setStatus`) and replies streamed as they are written (`chat.startStream`,
`chat.appendStream`, `chat.stopStream`), carrying `markdown_text`, `task_update` and
`plan_update` chunks. Like Slack: a status clears when the bot replies in its thread or two
minutes after it was last set; in channels a stream names its recipient; a stopped stream
takes no more text."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from bot.standin.records import TASK_STATES, Message, StatusChange, json_list, json_object

MARKDOWN_LIMIT = 12_000  # characters of markdown_text in one call
STATUS_TIMEOUT = 120.0  # seconds a status shows without being set again
LOADING_LIMIT = 10  # loading messages in one status
DISPLAY_MODES = ("timeline", "plan")


def refused(error: str) -> dict[str, Any]:
    return {"ok": False, "error": error}


def parse_chunks(value: Any) -> list[dict[str, Any]]:
    """The `chunks` argument, checked; ValueError names what is wrong."""
    chunks = json_list(value) or []
    for chunk in chunks:
        if not isinstance(chunk, dict):
            raise ValueError("a chunk is an object")
        kind = chunk.get("type")
        if kind == "markdown_text":
            _text(chunk.get("text"), "markdown_text chunk")
        elif kind == "task_update":
            for name in ("id", "title"):
                if not isinstance(chunk.get(name), str) or not chunk[name]:
                    raise ValueError(f"task_update needs {name}")
            if chunk.get("status") not in TASK_STATES:
                raise ValueError(f"task_update status is one of {', '.join(TASK_STATES)}")
        elif kind == "plan_update":
            if not isinstance(chunk.get("title"), str):
                raise ValueError("plan_update needs a title")
        else:
            raise ValueError(f"unknown chunk type {kind!r}")
    return chunks


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected text")
    if len(value) > MARKDOWN_LIMIT:
        raise OverflowError(what)
    return value


def write(message: Message, markdown_text: str | None, chunks: list[dict[str, Any]]) -> None:
    """Append to a streamed message: text to its Markdown, tasks by id (a later update of
    a task replaces the fields it carries), the plan's title."""
    if markdown_text:
        message.streamed += markdown_text
    for chunk in chunks:
        kind = chunk["type"]
        if kind == "markdown_text":
            message.streamed += chunk["text"]
        elif kind == "plan_update":
            message.plan = chunk["title"]
        else:
            fields = {k: v for k, v in chunk.items() if k != "type"}
            known = next((t for t in message.tasks if t["id"] == chunk["id"]), None)
            if known is None:
                message.tasks.append(fields)
                message.task_at[chunk["id"]] = len(message.streamed)
            else:
                known.update(fields)


class AgentMethods:
    """The methods, mixed into `SlackWebApi` (which owns the state named here)."""

    messages: dict[tuple[str, str], Message]
    bot_user: str
    statuses: dict[tuple[str, str], list[StatusChange]]  # per thread, oldest first
    streaming_refused: set[str]  # channels that answer channel_type_not_supported
    status_timeout: float

    def next_ts(self) -> str:
        raise NotImplementedError

    if TYPE_CHECKING:  # `ContainerMethods`'

        def set_session_status(
            self, channel: str, thread_ts: str, status: object, **details: Any
        ) -> dict[str, Any]: ...

        def session_refusal(
            self, status: object, title: object = None
        ) -> dict[str, Any] | None: ...

    # -- the status line ----------------------------------------------------------------

    def status(self, channel: str, thread_ts: str, now: float | None = None) -> StatusChange | None:
        """The thread's status as Slack shows it now: None once cleared or timed out."""
        history = self.statuses.get((channel, thread_ts))
        if not history or not history[-1].status:
            return None
        latest = history[-1]
        if (time.time() if now is None else now) - latest.at > self.status_timeout:
            return None
        return latest

    def replied(self, channel: str, thread_ts: str | None, method: str) -> None:
        """The bot wrote in the thread: Slack clears its status."""
        if thread_ts and self.status(channel, thread_ts) is not None:
            self.statuses[(channel, thread_ts)].append(StatusChange(time.time(), "", by=method))

    def m_assistant_threads_setStatus(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, thread_ts, status = args["channel_id"], args["thread_ts"], args["status"]
        try:
            loading = json_list(args.get("loading_messages"))
        except ValueError:
            return refused("invalid_arguments")
        if loading is not None and (
            len(loading) > LOADING_LIMIT or not all(isinstance(m, str) for m in loading)
        ):
            return refused("invalid_arguments")
        change = StatusChange(time.time(), str(status), loading or None)
        self.statuses.setdefault((channel, thread_ts), []).append(change)
        return {"ok": True}

    # -- streams ------------------------------------------------------------------------

    def m_chat_startStream(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, thread_ts = str(args["channel"]), str(args["thread_ts"])
        if channel in self.streaming_refused:
            return refused("channel_type_not_supported")
        in_channel = channel[:1] in ("C", "G")
        if in_channel and not (args.get("recipient_team_id") and args.get("recipient_user_id")):
            return refused("invalid_arguments")  # Slack wants the recipient in channels
        mode = args.get("task_display_mode")
        if mode is not None and mode not in DISPLAY_MODES:
            return refused("invalid_arguments")
        message = Message(
            channel, self.next_ts(), "", self.bot_user, thread_ts=thread_ts, streaming=True
        )
        message.task_display_mode = mode
        error = self._append(message, args)
        if error:
            return error
        self.messages[(channel, message.ts)] = message
        self.replied(channel, thread_ts, "chat.startStream")
        return {"ok": True, "channel": channel, "ts": message.ts}

    def m_chat_appendStream(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self._stream(args)
        if not isinstance(message, Message):
            return message
        if not args.get("markdown_text") and not args.get("chunks"):
            return refused("invalid_arguments")
        return self._append(message, args) or {
            "ok": True,
            "channel": message.channel,
            "ts": message.ts,
        }

    def m_chat_stopStream(self, args: dict[str, Any]) -> dict[str, Any]:
        """The last of the text and tasks; `blocks` show under the streamed text;
        `session_status` moves the thread's agent session (as `agents.sessions.setStatus`
        does) in the same call."""
        message = self._stream(args)
        if not isinstance(message, Message):
            return message
        try:
            blocks = json_list(args.get("blocks"))
            metadata = json_object(args.get("metadata"))
        except ValueError:
            return refused("invalid_arguments")
        session_status = args.get("session_status")
        if session_status is not None:
            refusal = self.session_refusal(session_status)
            if message.thread_ts is None:
                refusal = refused("invalid_arguments")
            if refusal is not None:
                return refusal
        error = self._append(message, args)
        if error:
            return error
        if session_status is not None and message.thread_ts is not None:
            self.set_session_status(message.channel, message.thread_ts, session_status)
        if blocks is not None:
            message.blocks = blocks
        if metadata is not None:
            message.metadata = metadata
        message.streaming = False
        message.text = message.text or message.streamed  # what conversations.replies gives
        return {"ok": True, "channel": message.channel, "ts": message.ts}

    def _stream(self, args: dict[str, Any]) -> Message | dict[str, Any]:
        """The bot's streamed message an append or stop names, or Slack's error."""
        message = self.messages.get((str(args["channel"]), str(args["ts"])))
        if message is None or message.ephemeral_to or message.user != self.bot_user:
            return refused("message_not_found")
        if not message.streaming:
            return refused("message_not_in_streaming_state")
        return message

    def _append(self, message: Message, args: dict[str, Any]) -> dict[str, Any] | None:
        """Checks everything first: a refused call changes nothing."""
        try:
            text = args.get("markdown_text")
            markdown_text = None if text is None else _text(text, "markdown_text")
            chunks = parse_chunks(args.get("chunks"))
        except OverflowError:
            return refused("msg_too_long")
        except ValueError:
            return refused("invalid_arguments")
        write(message, markdown_text, chunks)
        return None
