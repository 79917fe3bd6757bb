"""Slack's agent surface in the Web API stand-in, through slack_sdk over real HTTP: a thread's
status line, streamed replies with task steps, Markdown posts, and the faults tests ask for."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.models.messages.chunk import MarkdownTextChunk, PlanUpdateChunk, TaskUpdateChunk
from slack_sdk.web.async_client import AsyncWebClient

from bot.standin.slack_api import BOT_ID, Message, SlackWebApi
from testkit.slack import running_api

THREAD = "1700000000.000100"
FEEDBACK = [
    {
        "type": "context_actions",
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": "answer_feedback",
                "positive_button": {"text": {"type": "plain_text", "text": "Good"}, "value": "g"},
                "negative_button": {"text": {"type": "plain_text", "text": "Bad"}, "value": "b"},
            }
        ],
    }
]


async def refused(call: Awaitable[Any]) -> str:
    """Slack's error for a call that must fail."""
    with pytest.raises(SlackApiError) as failed:
        await call
    return str(failed.value.response["error"])


async def test_a_status_shows_until_the_bot_replies_or_two_minutes_pass() -> None:
    api = SlackWebApi()
    async with running_api(api) as url:
        client = AsyncWebClient(token="xoxb-t", base_url=f"{url}/api/")
        loading = ["Thinking…", "Reading the thread…"]
        await client.assistant_threads_setStatus(
            channel_id="C1", thread_ts=THREAD, status="is thinking…", loading_messages=loading
        )
        shown = api.status("C1", THREAD)
        assert shown is not None and (shown.status, shown.loading_messages) == (
            "is thinking…",
            loading,
        )
        assert api.status("C1", THREAD, now=shown.at + 119) is shown
        assert api.status("C1", THREAD, now=shown.at + 121) is None  # Slack's timeout
        assert api.status("C1", "9.000001") is None  # another thread

        await client.chat_postMessage(channel="C1", text="elsewhere", thread_ts="9.000001")
        assert api.status("C1", THREAD) is not None  # a reply in another thread
        await client.chat_postMessage(channel="C1", text="answer", thread_ts=THREAD)
        assert api.status("C1", THREAD) is None
        await client.assistant_threads_setStatus(
            channel_id="C1", thread_ts=THREAD, status="is using current_time…"
        )
        await client.chat_startStream(
            channel="C1", thread_ts=THREAD, recipient_team_id="T0LOCAL", recipient_user_id="U0ALICE"
        )
        assert api.status("C1", THREAD) is None
        await client.assistant_threads_setStatus(channel_id="C1", thread_ts=THREAD, status="x")
        await client.assistant_threads_setStatus(channel_id="C1", thread_ts=THREAD, status="")
        assert api.status("C1", THREAD) is None
        history = [(s.status, s.loading_messages, s.by) for s in api.statuses[("C1", THREAD)]]
        assert history == [
            ("is thinking…", loading, "assistant.threads.setStatus"),
            ("", None, "chat.postMessage"),
            ("is using current_time…", None, "assistant.threads.setStatus"),
            ("", None, "chat.startStream"),
            ("x", None, "assistant.threads.setStatus"),
            ("", None, "assistant.threads.setStatus"),
        ]
        too_many = [f"m{n}" for n in range(11)]
        for call in (
            client.assistant_threads_setStatus(
                channel_id="C1", thread_ts=THREAD, status="x", loading_messages=too_many
            ),
            client.api_call("assistant.threads.setStatus", json={"channel_id": "C1"}),
        ):
            assert await refused(call) == "invalid_arguments"
        api.channel_errors["C2"] = "channel_not_found"
        status = client.assistant_threads_setStatus(channel_id="C2", thread_ts=THREAD, status="x")
        assert await refused(status) == "channel_not_found"
        assert ("C2", THREAD) not in api.statuses


async def test_a_streamed_reply_grows_ticks_its_tasks_and_ends_with_blocks() -> None:
    api = SlackWebApi()
    api.messages[("C1", THREAD)] = Message("C1", THREAD, "<@UBOT> hi", "U0ALICE")
    async with running_api(api) as url:
        client = AsyncWebClient(token="xoxb-t", base_url=f"{url}/api/")
        started = await client.chat_startStream(
            channel="C1",
            thread_ts=THREAD,
            task_display_mode="timeline",
            chunks=[
                MarkdownTextChunk(text="Let me look. "),
                TaskUpdateChunk(id="call_1", title="current_time", status="in_progress"),
            ],
            recipient_team_id="T0LOCAL",
            recipient_user_id="U0ALICE",
        )
        ts = started["ts"]
        assert (started["channel"], started["ok"]) == ("C1", True)
        message = api.messages[("C1", ts)]
        assert (message.streaming, message.thread_ts, message.user) == (True, THREAD, api.bot_user)
        assert message.streamed == "Let me look. "
        await client.chat_appendStream(
            channel="C1",
            ts=ts,
            chunks=[
                {
                    "type": "task_update",
                    "id": "call_1",
                    "title": "current_time",
                    "status": "complete",
                    "output": "13:00",
                },
                {
                    "type": "task_update",
                    "id": "call_2",
                    "title": "file_ticket",
                    "status": "pending",
                },
                PlanUpdateChunk(title="Answering"),
            ],
        )
        await client.chat_appendStream(channel="C1", ts=ts, markdown_text="It is **13:00**")
        assert message.tasks == [
            {"id": "call_1", "title": "current_time", "status": "complete", "output": "13:00"},
            {"id": "call_2", "title": "file_ticket", "status": "pending"},
        ]
        assert message.task_at == {"call_1": len("Let me look. "), "call_2": len("Let me look. ")}
        assert (message.plan, message.task_display_mode) == ("Answering", "timeline")
        metadata = {"event_type": "agent_outcome", "event_payload": {"kind": "Answer"}}
        await client.chat_stopStream(
            channel="C1", ts=ts, markdown_text=" in Oslo.", blocks=FEEDBACK, metadata=metadata
        )
        assert message.streamed == "Let me look. It is **13:00** in Oslo."
        assert (message.streaming, message.blocks, message.metadata) == (False, FEEDBACK, metadata)
        for call in (
            client.chat_appendStream(channel="C1", ts=ts, markdown_text="more"),
            client.chat_stopStream(channel="C1", ts=ts),
        ):
            assert await refused(call) == "message_not_in_streaming_state"
        for call in (
            client.chat_appendStream(channel="C1", ts="9.000009", markdown_text="x"),
            client.chat_stopStream(channel="C1", ts="9.000009"),
        ):
            assert await refused(call) == "message_not_found"

        # Read back like the bot reads a thread after a restart.
        replies = await client.conversations_replies(
            channel="C1", ts=THREAD, include_all_metadata=True
        )
        [reply] = [m for m in replies["messages"] if m["ts"] == ts]
        assert reply["text"] == message.streamed and reply["bot_id"] == BOT_ID
        assert reply["metadata"] == metadata and reply["blocks"] == FEEDBACK
        plain = await client.conversations_replies(channel="C1", ts=THREAD)
        assert all("metadata" not in m for m in plain["messages"])

        # Replaced by chat.update: the stream's text and tasks go, the metadata stays.
        await client.chat_update(channel="C1", ts=ts, text="cut short", blocks=[])
        assert (message.text, message.blocks, message.streamed, message.tasks) == (
            "cut short",
            [],
            "",
            [],
        )
        assert message.metadata == metadata
        await client.chat_update(channel="C1", ts=ts, text="again", metadata={"event_type": "x"})
        assert message.metadata == {"event_type": "x"}


async def test_slack_sdks_chat_stream_helper_works_against_it() -> None:
    api = SlackWebApi()
    async with running_api(api) as url:
        client = AsyncWebClient(token="xoxb-t", base_url=f"{url}/api/")
        stream = await client.chat_stream(
            channel="D1", thread_ts=THREAD, buffer_size=8
        )  # a direct message: no recipient needed
        for word in ("Streaming ", "works ", "in ", "pieces."):
            await stream.append(markdown_text=word)
        await stream.stop(blocks=FEEDBACK)
        [message] = api.bot_replies("D1", THREAD)
        assert message.streamed == "Streaming works in pieces."
        assert not message.streaming and message.blocks == FEEDBACK
        methods = [c.method for c in api.calls]
        assert methods[0] == "chat.startStream" and methods[-1] == "chat.stopStream"


async def test_streams_refuse_like_slack_and_take_the_faults_tests_ask_for() -> None:
    api = SlackWebApi()
    async with running_api(api) as url:
        client = AsyncWebClient(token="xoxb-t", base_url=f"{url}/api/")
        assert await refused(client.chat_startStream(channel="C1", thread_ts=THREAD)) == (
            "invalid_arguments"  # a channel wants the recipient
        )
        bad_chunk = {"type": "task_update", "id": "c", "title": "t", "status": "done"}
        long_text = "x" * 12_001
        for call, error in (
            (
                client.chat_startStream(channel="G1", thread_ts=THREAD, recipient_user_id="U1"),
                "invalid_arguments",
            ),
            (
                client.chat_startStream(channel="D1", thread_ts=THREAD, chunks=[bad_chunk]),
                "invalid_arguments",
            ),
            (
                client.chat_startStream(channel="D1", thread_ts=THREAD, task_display_mode="grid"),
                "invalid_arguments",
            ),
            (
                client.chat_startStream(channel="D1", thread_ts=THREAD, markdown_text=long_text),
                "msg_too_long",
            ),
        ):
            assert await refused(call) == error
        assert api.messages == {}  # nothing refused was kept

        api.method_errors["chat.startStream"] = "unknown_method"  # a workspace without it
        start = client.chat_startStream(channel="D1", thread_ts=THREAD)
        assert await refused(start) == "unknown_method"
        del api.method_errors["chat.startStream"]
        api.streaming_refused.add("C2")
        start = client.chat_startStream(
            channel="C2", thread_ts=THREAD, recipient_team_id="T0LOCAL", recipient_user_id="U0ALICE"
        )
        assert await refused(start) == "channel_type_not_supported"
        api.channel_errors["C3"] = "is_archived"
        start = client.chat_startStream(
            channel="C3", thread_ts=THREAD, recipient_team_id="T0LOCAL", recipient_user_id="U0ALICE"
        )
        assert await refused(start) == "is_archived"
        ts = (
            await client.chat_startStream(
                channel="C1",
                thread_ts=THREAD,
                recipient_team_id="T0LOCAL",
                recipient_user_id="U0ALICE",
            )
        )["ts"]
        api.failures["chat.appendStream"] = ["message_not_in_streaming_state", 503]
        append = client.chat_appendStream(channel="C1", ts=ts, markdown_text="a")
        assert await refused(append) == "message_not_in_streaming_state"
        append = client.chat_appendStream(channel="C1", ts=ts, markdown_text="a")
        with pytest.raises(SlackApiError) as failed:
            await append
        assert failed.value.response.status_code == 503
        api.rate_limited["chat.stopStream"] = 1
        with pytest.raises(SlackApiError) as limited:
            await client.chat_stopStream(channel="C1", ts=ts)
        assert limited.value.response.status_code == 429
        assert api.messages[("C1", ts)].streaming  # none of that reached the stream
        assert api.messages[("C1", ts)].streamed == ""
        assert [c.method for c in api.calls][-3:] == [
            "chat.appendStream:message_not_in_streaming_state",
            "chat.appendStream:503",
            "chat.stopStream:429",
        ]


@pytest.mark.filterwarnings("ignore:The top-level `text` argument is missing")
async def test_markdown_text_posts() -> None:
    api = SlackWebApi()
    async with running_api(api) as url:
        client = AsyncWebClient(token="xoxb-t", base_url=f"{url}/api/")
        posted = await client.chat_postMessage(
            channel="C1", thread_ts=THREAD, markdown_text="**bold** and `code`"
        )
        message = api.messages[("C1", posted["ts"])]
        assert (message.markdown_text, message.text) == ("**bold** and `code`", "")
        assert posted["message"]["text"] == "**bold** and `code`"
        assert await refused(client.chat_postMessage(channel="C1", text="")) == "no_text"
        too_long = client.chat_postMessage(channel="C1", markdown_text="x" * 12_001)
        assert await refused(too_long) == "msg_too_long"
        await client.chat_update(channel="C1", ts=posted["ts"], markdown_text="_edited_")
        assert message.markdown_text == "_edited_"


async def test_stopping_a_stream_may_move_the_threads_agent_session() -> None:
    api = SlackWebApi()
    async with running_api(api) as url:
        client = AsyncWebClient(token="xoxb-t", base_url=f"{url}/api/")
        await client.agents_sessions_setStatus(
            channel_id="D1", thread_ts=THREAD, status="processing"
        )
        first = await client.chat_startStream(channel="D1", thread_ts=THREAD, markdown_text="a")
        # A status Slack does not know is refused, and nothing changes.
        assert (
            await refused(
                client.chat_stopStream(channel="D1", ts=first["ts"], session_status="done")
            )
            == "invalid_arguments"
        )
        assert api.messages[("D1", first["ts"])].streaming
        await client.chat_stopStream(
            channel="D1", ts=first["ts"], markdown_text="b", session_status="closed"
        )
        session = api.session("D1", THREAD)
        assert session is not None and session.status == "closed"
        assert api.messages[("D1", first["ts"])].text == "ab"
        # Where sessions are refused, so is a stop that asks to move one.
        api.sessions_refused = "not_allowed_token_type"
        second = await client.chat_startStream(channel="D1", thread_ts=THREAD, markdown_text="c")
        assert (
            await refused(
                client.chat_stopStream(channel="D1", ts=second["ts"], session_status="closed")
            )
            == "not_allowed_token_type"
        )
        await client.chat_stopStream(channel="D1", ts=second["ts"])
        assert not api.messages[("D1", second["ts"])].streaming
