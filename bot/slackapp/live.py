"""What a run is doing, shown in its Slack thread while it works (the runtime's `Progress`):
Slack's agent session (`sessions`: processing, suspended while a call waits for a person,
closed when done, with Slack's own stop control), or where Slack refuses sessions a status
line and the bot's own Stop control (`status_line`); and the reply streamed as the model
writes it (`chat.startStream` / `appendStream` / `stopStream`, with slack_sdk's chunk
models) with tool calls as task updates.

All of it is a preview, held in this process only: nothing here is stored, and a failure
here never touches the run. The committed outbox stays the source of truth: when the answer
is delivered, the poster hands it to `finish_answer`, which closes the stream *as* the answer
(with its marks and feedback buttons) when the stream holds exactly it, and otherwise
replaces the stream's content with it. Where Slack refuses a stream (a channel type without
streaming) the thread falls back to plain posts; where it refuses a status, to a reaction.
A thread's calls use its workspace's client (`clients`), chosen when its run begins; a
workspace where the app is not installed shows nothing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.models.messages.chunk import Chunk, MarkdownTextChunk, TaskUpdateChunk
from slack_sdk.web.async_client import AsyncWebClient

from bot.runtime import Step
from bot.slackapp.clients import SlackClients, TeamNotInstalled, as_clients
from bot.slackapp.live_thread import ERRORS, LiveThread, error_of
from bot.slackapp.markdown import MARKDOWN_LIMIT, MarkdownEscaper
from bot.slackapp.marks import PREVIEW, mark
from bot.slackapp.sessions import TITLE_LIMIT, AgentSessions
from bot.slackapp.status_line import (
    QUEUED,
    STATUS_RENEWAL,
    STOP_OFFER_AFTER,
    THINKING,
    StatusLine,
)
from storage import ConversationKey

log = logging.getLogger(__name__)
APPEND_INTERVAL = 0.6  # seconds between appends: chat.appendStream is rate tier 4 (100/min)
TASK_STATUS = {
    Step.RUNNING: "in_progress",
    Step.DONE: "complete",
    Step.FAILED: "error",
    Step.WAITING: "pending",
    Step.UNKNOWN: "error",
}
TASK_DETAILS = {Step.WAITING: "Waiting for approval", Step.UNKNOWN: "Outcome unknown"}
CUT_SHORT = "_This reply was cut short; see below._"
TITLES_KEPT = 1_000  # first requests waiting for their run to begin here


class LiveThreads:
    """The `Progress` of a Slack bot: one `LiveThread` per thread this process works on."""

    def __init__(
        self,
        client: AsyncWebClient | SlackClients,
        *,
        append_interval: float = APPEND_INTERVAL,
        status_renewal: float = STATUS_RENEWAL,
        stop_offer_after: float | None = STOP_OFFER_AFTER,
    ) -> None:
        self.clients = as_clients(client)
        self.append_interval = append_interval
        self.sessions = AgentSessions()
        self.status_line = StatusLine(renewal=status_renewal, stop_offer_after=stop_offer_after)
        self.threads: dict[ConversationKey, LiveThread] = {}
        self.no_stream: set[ConversationKey] = set()  # Slack refused streaming there
        self.titles: dict[ConversationKey, str] = {}  # first requests of new conversations
        self.queued_here: dict[ConversationKey, None] = {}  # said queued, not begun here

    def name(self, key: ConversationKey, request: str) -> None:
        """The conversation's first request, its title when its run begins (`begin`)."""
        title = " ".join(request.split())[:TITLE_LIMIT]
        if title:
            if len(self.titles) >= TITLES_KEPT:  # runs another replica took: never begun here
                self.titles.pop(next(iter(self.titles)))
            self.titles[key] = title

    # -- Progress -----------------------------------------------------------------------

    async def queued(self, key: ConversationKey, requester: str | None) -> None:
        """The thread waits for a run slot: its status line says so (whoever begins its
        run next, here or on another replica, sets its own status over it)."""
        if key in self.threads:
            return  # a run of this thread shows its own work here
        try:
            client = await self.clients.for_key(key)
        except TeamNotInstalled:
            return
        thread = LiveThread(key, requester, client)
        await self.status_line.show(thread, QUEUED)
        if thread.status or thread.reacted:
            if len(self.queued_here) >= TITLES_KEPT:  # begun on another replica
                self.queued_here.pop(next(iter(self.queued_here)))
            self.queued_here[key] = None

    async def begin(self, key: ConversationKey, requester: str | None) -> None:
        if key in self.threads:  # a run that did not say it ended: its work is over
            await self.end(key)
        title = self.titles.pop(key, None)
        try:
            client = await self.clients.for_key(key)
        except TeamNotInstalled:
            return  # nothing to show it to: every other call finds no thread
        thread = self.threads[key] = LiveThread(key, requester, client)
        was_queued = self.queued_here.pop(key, False) is None
        if not await self.sessions.open(thread, title):
            await self.status_line.show(thread, THINKING)
            if title and key.channel.startswith("D"):  # an assistant thread, the older way
                await self._set_title(thread, title)
        elif was_queued:  # the session shows the work: the queued status goes
            thread.status = QUEUED
            await self.status_line.clear(thread)
        native = thread.session and self.sessions.native_stop(key)
        self.status_line.start(thread, offer_stop=not native)

    async def text(self, key: ConversationKey, delta: str) -> None:
        thread = self.threads.get(key)
        if thread is None:
            return
        if thread.settled:  # another run after the answer that closed the session
            await self.sessions.reopen(thread)
        if key in self.no_stream:
            return
        stream = thread.stream
        stream.tail += delta
        if stream.broken or not stream.whole:
            return
        safe = stream.escaper.feed(delta)
        if stream.sent + len(stream.text) + len(safe) > MARKDOWN_LIMIT - 100:
            stream.whole = False  # the answer will not fit one message: it is posted in parts
            return
        stream.text += safe
        if stream.ts is None and not thread.lock.locked():
            async with thread.lock:  # the first words show at once
                await self._flush(thread)
        elif thread.flusher is None or thread.flusher.done():
            thread.flusher = asyncio.create_task(self._flush_later(thread))

    async def step(self, key: ConversationKey, call_id: str, tool: str, state: Step) -> None:
        thread = self.threads.get(key)
        if thread is None:
            return
        if thread.settled:
            await self.sessions.reopen(thread)
        stream = thread.stream
        stream.text += stream.escaper.flush()
        stream.escaper = MarkdownEscaper()  # the model's next response starts afresh
        stream.tail = ""
        thread.waiting = thread.waiting or state is Step.WAITING
        if not thread.session:  # a session shows it is working; a status line says how
            if state is Step.RUNNING:
                await self.status_line.show(thread, f"is using {tool}…")
            elif state is Step.WAITING:
                await self.status_line.show(thread, "is waiting for approval…")
        if key in self.no_stream or stream.broken:
            return
        stream.tasks[call_id] = TaskUpdateChunk(
            id=call_id, title=tool, status=TASK_STATUS[state], details=TASK_DETAILS.get(state)
        )
        async with thread.lock:
            await self._flush(thread)

    async def end(self, key: ConversationKey) -> None:
        thread = self.threads.pop(key, None)
        if thread is None:
            return
        for timer in [*thread.timers, thread.flusher]:
            if timer is not None:
                timer.cancel()
        async with thread.lock:
            await self._close_preview(thread)
            await self.sessions.settle(thread)
            await self.status_line.clear(thread)

    async def close_session(self, key: ConversationKey) -> None:
        """Slack's stop was pressed where nothing runs (a session left `processing` by a
        run that is over, in a process that is gone): the session is closed."""
        if key in self.threads:
            return  # the run here ends it
        try:
            client = await self.clients.for_key(key)
        except TeamNotInstalled:
            return
        await self.sessions.close(LiveThread(key, None, client))

    async def _set_title(self, thread: LiveThread, title: str) -> None:
        try:
            await thread.client.assistant_threads_setTitle(
                channel_id=thread.key.channel, thread_ts=thread.key.thread_ts, title=title
            )
        except ERRORS as exc:
            log.debug("%s: no title: %s", thread.key, error_of(exc))

    # -- the answer ---------------------------------------------------------------------

    def posted_below(self, key: ConversationKey) -> None:
        """The poster put a message into the thread: an open stream is now above it."""
        thread = self.threads.get(key)
        if thread is not None and thread.stream.ts is not None and not thread.stream.done:
            thread.stream.overtaken = True

    def open_stream(self, key: ConversationKey) -> str | None:
        """The ts of the reply this process is streaming into the thread, if any."""
        thread = self.threads.get(key)
        if thread is None or thread.stream.done:
            return None
        return thread.stream.ts

    async def finish_answer(
        self,
        key: ConversationKey,
        answer: str,
        *,
        fallback: str,
        blocks: list[dict[str, Any]],
        footer: list[dict[str, Any]],
        metadata: dict[str, Any],
    ) -> bool:
        """Deliver the answer's first part through the thread's open stream: closed as is
        (with `footer` and the marks) when it holds exactly the answer, else replaced by
        `blocks`. False when there is no open stream (the caller posts), or when something
        was posted below the stream (a notice of the same turn): the thread must read in
        order, so the stream goes and the answer is posted. Raises Slack's error when the
        stream can neither be closed nor replaced."""
        thread = self.threads.get(key)
        if thread is None or thread.stream.ts is None or thread.stream.done:
            return False
        if thread.stream.overtaken:
            async with thread.lock:
                try:
                    await thread.client.chat_delete(channel=key.channel, ts=thread.stream.ts)
                    thread.stream.done = True
                    return False
                except ERRORS as exc:  # then it holds the answer where it is
                    log.info("%s: could not remove the stream: %s", key, error_of(exc))
        async with thread.lock:
            stream = thread.stream
            assert stream.ts is not None
            if thread.flusher is not None:
                thread.flusher.cancel()
            stream.text += stream.escaper.flush()
            exact = stream.whole and not stream.broken and stream.tail.strip() == answer.strip()
            if exact:
                closing = self.sessions.closing_with_answer(thread)
                try:
                    await self._stop_stream(
                        thread, blocks=footer, metadata=metadata, session_status=closing
                    )
                    stream.done = True
                    thread.settled = closing is not None
                    return True
                except SlackApiError as exc:
                    log.info("%s: closing the stream failed (%s); replacing it", key, error_of(exc))
            with contextlib.suppress(*ERRORS):
                await self._stop_stream(thread)
            await thread.client.chat_update(
                channel=key.channel,
                ts=stream.ts,
                text=fallback,
                blocks=blocks,
                metadata=metadata,
            )
            stream.done = True
            return True

    # -- streaming ----------------------------------------------------------------------

    async def _flush_later(self, thread: LiveThread) -> None:
        await asyncio.sleep(self.append_interval)
        async with thread.lock:
            await self._flush(thread)

    async def _flush(self, thread: LiveThread) -> None:
        """Send what is waiting: text and task updates, in one call."""
        stream, key = thread.stream, thread.key
        if stream.done or stream.broken or not (stream.text or stream.tasks):
            return
        text, tasks = stream.text, list(stream.tasks.values())
        chunks: list[Chunk] = [MarkdownTextChunk(text=text)] if text else []
        chunks += tasks
        try:
            if stream.ts is None:
                started = await thread.client.chat_startStream(
                    channel=key.channel,
                    thread_ts=key.thread_ts,
                    recipient_team_id=key.team if thread.requester else None,
                    recipient_user_id=thread.requester,
                    task_display_mode="timeline",
                    chunks=chunks,
                )
                stream.ts = str(started["ts"])
            else:
                await thread.client.chat_appendStream(
                    channel=key.channel, ts=stream.ts, chunks=chunks
                )
        except ERRORS as exc:
            log.info("%s: streaming stopped (%s); the answer will be posted", key, error_of(exc))
            stream.broken, stream.whole = True, False
            if stream.ts is None:
                self.no_stream.add(key)  # this thread gets plain posts from now on
            return
        stream.sent += len(text)
        stream.text = stream.text[len(text) :]  # what arrived meanwhile stays
        for sent in tasks:
            if stream.tasks.get(sent.id) is sent:  # not updated meanwhile
                del stream.tasks[sent.id]

    async def _stop_stream(self, thread: LiveThread, **final: Any) -> None:
        stream = thread.stream
        assert stream.ts is not None
        chunks: list[Chunk] = []
        text = stream.text if not stream.broken else ""
        if text:
            chunks.append(MarkdownTextChunk(text=text))
        chunks += list(stream.tasks.values())
        await thread.client.chat_stopStream(
            channel=thread.key.channel, ts=stream.ts, chunks=chunks or None, **final
        )
        stream.sent += len(text)
        stream.text, stream.tasks = "", {}

    async def _close_preview(self, thread: LiveThread) -> None:
        """The run stopped working here without its answer going into the stream (it paused
        for approval, was stopped, failed, or its answer's delivery failed). A reply that
        only showed tool steps goes (the approval request or the notice that follows says
        it better); a reply cut mid-answer is replaced by a note, so that the answer
        delivered later is not shown twice; narration before a tool call stays."""
        stream = thread.stream
        if stream.ts is None or stream.done:
            return
        stream.done = True
        try:
            if not (stream.sent or stream.text):
                await thread.client.chat_delete(channel=thread.key.channel, ts=stream.ts)
                return
            with contextlib.suppress(SlackApiError):  # Slack may have ended it already
                await self._stop_stream(thread, metadata=mark(PREVIEW))
            if stream.tail.strip():
                await thread.client.chat_update(
                    channel=thread.key.channel,
                    ts=stream.ts,
                    text=CUT_SHORT,
                    blocks=[],
                    metadata=mark(PREVIEW),
                )
        except ERRORS as exc:
            log.warning("%s: could not close the streamed reply: %s", thread.key, error_of(exc))
