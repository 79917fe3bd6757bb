"""What local mode's page is told to show of Slack's agent surface, in-process, with the bot
played through the Web API stand-in (real HTTP, slack_sdk): a thread's status line, a reply
streamed with its task steps, Markdown parsed into nodes (never HTML), feedback buttons and
an ephemeral Stop control whose clicks reach the bot as Slack sends them, and answers to
their response_url that replace or delete the clicked message."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs

import aiohttp
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from bot.standin.markdown import markdown
from bot.standin.slack_api import Message, SlackWebApi
from bot.standin.view import CHANNEL
from bot.standin.workspace import USERS, Workspace
from testkit.services import free_port
from testkit.slack import SECRET, Harness, running_api
from tests.standin.test_page_endpoints import FakeBot, Page, fake_bot, settle, standin

FEEDBACK: dict[str, Any] = {
    "type": "context_actions",
    "elements": [
        {
            "type": "feedback_buttons",
            "action_id": "answer_feedback",
            "positive_button": {
                "text": {"type": "plain_text", "text": "Good answer"},
                "value": "good-1",
                "accessibility_label": "Mark as a good answer",
            },
            "negative_button": {
                "text": {"type": "plain_text", "text": "Bad answer"},
                "value": "bad-1",
            },
        }
    ],
}
STOP: list[dict[str, Any]] = [
    {"type": "section", "text": {"type": "mrkdwn", "text": "Working on it. Changed your mind?"}},
    {
        "type": "actions",
        "elements": [
            {
                "type": "button",
                "action_id": "stop_run",
                "text": {"type": "plain_text", "text": "Stop"},
                "value": "T0LOCAL:C0GENERAL:1.1",
                "style": "danger",
            }
        ],
    },
]


def test_markdown_becomes_nodes_and_never_html() -> None:
    text = (
        "# Plan\n\nIt is **13:00** in *Oslo*; see `time_in()`.\n"
        "<img src=x onerror=alert(1)> &lt;b&gt;not bold&lt;/b&gt; \\[link\\](https://evil.example)"
        "\n\n- one _two_\n- ~~three~~\n\n2. second\n3. third"
        "\n\n```\n<script>x</script> **raw**\n```"
    )
    assert markdown(text) == [
        {"h": ["Plan"]},
        {
            "p": [
                "It is ",
                {"b": ["13:00"]},
                " in ",
                {"i": ["Oslo"]},
                "; see ",
                {"code": "time_in()"},
                ".\n<img src=x onerror=alert(1)> <b>not bold</b> [link](https://evil.example)",
            ]
        },
        {"ul": [["one ", {"i": ["two"]}], [{"s": ["three"]}]]},
        {"ol": [["second"], ["third"]], "start": 2},
        {"pre": "<script>x</script> **raw**"},
    ]
    # Only http(s) links are links; snake_case and lone stars are text.
    assert markdown("[docs](https://example.com/a_b) [x](javascript:alert(1))")[0]["p"][:2] == [
        {"a": ["docs"], "href": "https://example.com/a_b"},
        " [x](javascript:alert(1))",
    ]
    assert markdown("a snake_case_name, 2 * 3 * 4, **open") == [
        {"p": ["a snake_case_name, 2 * 3 * 4, **open"]}
    ]
    # Mid-stream: an open fence runs to the end; nesting is bounded.
    assert markdown("```\npartial") == [{"pre": "partial"}]
    deep = "_a" * 3000
    assert markdown(deep)  # no RecursionError


async def as_bot(workspace: Workspace, page: Page) -> AsyncWebClient:
    return AsyncWebClient(token=workspace.bot_token, base_url=f"{page.url}/api/")


async def thread_by(page: Page, user: str = "alice") -> str:
    status, _ = await page.post("/ui/post", {"user": user, "text": "@agent what time is it?"})
    assert status == 200
    return str((await page.state(user))["threads"][-1]["ts"])


async def test_status_streamed_reply_tasks_and_markdown_as_the_page_gets_them(
    tmp_path: Path,
) -> None:
    async with standin(tmp_path / "data") as (workspace, _, page):
        bot = await as_bot(workspace, page)
        thread = await thread_by(page)
        loading = ["Thinking…", "Reading the conversation…"]
        await bot.assistant_threads_setStatus(
            channel_id=CHANNEL, thread_ts=thread, status="is thinking…", loading_messages=loading
        )
        [shown] = (await page.state())["threads"]
        assert shown["status"] == {"text": "agent is thinking…", "loading": "Thinking…"}

        started = await bot.chat_startStream(
            channel=CHANNEL,
            thread_ts=thread,
            recipient_team_id=workspace.api.team,
            recipient_user_id=USERS["alice"],
            chunks=[
                {"type": "markdown_text", "text": "Let me **check**."},
                {
                    "type": "task_update",
                    "id": "c1",
                    "title": "current_time",
                    "status": "in_progress",
                },
            ],
        )
        [shown] = (await page.state())["threads"]
        assert shown["status"] is None  # the reply cleared it, as in Slack
        [reply] = shown["replies"]
        assert reply["streaming"] and reply["bot"]
        assert reply["stream"] == [
            {"md": [{"p": ["Let me ", {"b": ["check"]}, "."]}]},
            {
                "tasks": [
                    {
                        "id": "c1",
                        "title": "current_time",
                        "state": "running",
                        "details": None,
                        "output": None,
                    }
                ]
            },
        ]
        await bot.assistant_threads_setStatus(
            channel_id=CHANNEL, thread_ts=thread, status="is using current_time…"
        )
        ts = started["ts"]
        await bot.chat_appendStream(
            channel=CHANNEL,
            ts=ts,
            chunks=[
                {"type": "task_update", "id": "c1", "title": "current_time", "status": "complete"},
                {
                    "type": "task_update",
                    "id": "c2",
                    "title": "file_ticket",
                    "status": "pending",
                    "details": "Waiting for approval",
                },
                {"type": "task_update", "id": "c3", "title": "send", "status": "error"},
                {"type": "markdown_text", "text": "\n\nIt is &lt;13:00&gt;"},
            ],
        )
        [shown] = (await page.state())["threads"]
        assert shown["status"] == {"text": "agent is using current_time…", "loading": None}
        parts = shown["replies"][0]["stream"]
        assert [t["state"] for t in parts[1]["tasks"]] == ["done", "waiting", "failed"]
        assert parts[1]["tasks"][1]["details"] == "Waiting for approval"
        assert parts[2] == {"md": [{"p": ["It is <13:00>"]}]}

        await bot.chat_stopStream(
            channel=CHANNEL,
            ts=ts,
            blocks=[{"type": "markdown", "text": "Also *this*."}, FEEDBACK],
        )
        await bot.assistant_threads_setStatus(channel_id=CHANNEL, thread_ts=thread, status="")
        [shown] = (await page.state())["threads"]
        [reply] = shown["replies"]
        assert shown["status"] is None and not reply["streaming"]
        markdown_block, actions = reply["blocks"]
        assert markdown_block["nodes"] == [{"p": ["Also ", {"i": ["this"]}, "."]}]
        assert [b["which"] for b in actions["elements"][0]["buttons"]] == ["positive", "negative"]
        assert actions["elements"][0]["buttons"][0]["label"] == "Mark as a good answer"
        assert actions["elements"][0]["buttons"][1]["label"] == "Bad answer"

        # markdown_text posts show as Markdown; a stream replaced by chat.update is gone.
        await bot.chat_postMessage(channel=CHANNEL, thread_ts=thread, markdown_text="`done`")
        await bot.chat_update(channel=CHANNEL, ts=ts, text="_cut short_", blocks=[])
        [shown] = (await page.state())["threads"]
        first, second = shown["replies"]
        assert (first["stream"], first["text"]) == (None, "_cut short_")
        assert second["markdown"] == [{"p": [{"code": "done"}]}]


def clicks(bot: FakeBot, secret: str) -> list[dict[str, Any]]:
    """The block_actions the bot received, each checked for Slack's signature."""
    found = []
    for headers, body in bot.received:
        if body.startswith("payload="):
            assert SignatureVerifier(secret).is_valid_request(body, headers)
            found.append(json.loads(parse_qs(body)["payload"][0]))
    return found


async def respond(url: str, **answer: Any) -> None:
    async with aiohttp.ClientSession() as http, http.post(url, json=answer) as response:
        assert response.status == 200


async def clicked(workspace: Workspace, page: Page, **click: str) -> None:
    """A click on the page (`/ui/click`'s fields), accepted and delivered to the bot."""
    status, _ = await page.post("/ui/click", click)
    assert status == 200
    await settle(workspace)


async def test_feedback_and_stop_clicks_reach_the_bot_as_slack_sends_them(tmp_path: Path) -> None:
    async with standin(tmp_path / "data") as (workspace, fake, page):
        bot = await as_bot(workspace, page)
        thread = await thread_by(page)
        answer = await bot.chat_postMessage(
            channel=CHANNEL,
            thread_ts=thread,
            text="It is 13:00.",
            blocks=[{"type": "markdown", "text": "It is 13:00."}, FEEDBACK],
        )
        await clicked(
            workspace,
            page,
            user="alice",
            ts=answer["ts"],
            thread_ts=thread,
            action_id="answer_feedback",
            value="good-1",
            label="Good answer",
        )
        [click] = clicks(fake, workspace.secret)
        [action] = click["actions"]
        assert {k: action[k] for k in ("type", "action_id", "block_id", "value")} == {
            "type": "feedback_buttons",
            "action_id": "answer_feedback",
            "block_id": "b1",  # made up by place, as Slack makes one up
            "value": "good-1",
        }
        assert click["container"] == {
            "type": "message",
            "message_ts": answer["ts"],
            "channel_id": CHANNEL,
            "is_ephemeral": False,
            "thread_ts": thread,
        }
        assert click["user"] == {"id": USERS["alice"]} and click["team"]["id"] == "T0LOCAL"
        assert click["message"]["ts"] == answer["ts"] and click["trigger_id"]
        state = await page.state("alice")
        buttons = state["threads"][0]["replies"][0]["blocks"][1]["elements"][0]["buttons"]
        assert [b["chosen"] for b in buttons] == [True, False]
        assert [(c["action_type"], c["value"], c["status"]) for c in state["clicks"]] == [
            ("feedback_buttons", "good-1", 200)
        ]
        bob = await page.state("bob")
        assert bob["clicks"] == []
        bob_buttons = bob["threads"][0]["replies"][0]["blocks"][1]["elements"][0]["buttons"]
        assert not any(b["chosen"] for b in bob_buttons)

        # The Stop control: ephemeral, clickable, replaced and then deleted by the answers
        # to its response_url.
        # The run works again (a Stop offer shows only while it does).
        await bot.assistant_threads_setStatus(
            channel_id=CHANNEL, thread_ts=thread, status="is working…"
        )
        await bot.chat_postEphemeral(
            channel=CHANNEL, user=USERS["alice"], thread_ts=thread, text="Working", blocks=STOP
        )
        [stop] = (await page.state("alice"))["ephemeral"]
        assert stop["thread_ts"] == thread and stop["blocks"] == STOP
        assert (await page.state("bob"))["ephemeral"] == []
        status, _ = await page.post(
            "/ui/click",
            {
                "user": "bob",
                "ephemeral": stop["id"],
                "ts": "",
                "action_id": "stop_run",
                "value": "x",
                "label": "Stop",
            },
        )
        assert status == 400  # not bob's
        await clicked(
            workspace,
            page,
            user="alice",
            ephemeral=stop["id"],
            ts="",
            thread_ts=thread,
            action_id="stop_run",
            value="T0LOCAL:C0GENERAL:1.1",
            label="Stop",
        )
        stopped = clicks(fake, workspace.secret)[-1]
        assert stopped["container"]["is_ephemeral"] is True and "message" not in stopped
        assert stopped["actions"][0] | {"action_ts": ""} == {
            "action_id": "stop_run",
            "block_id": "b1",
            "type": "button",
            "value": "T0LOCAL:C0GENERAL:1.1",
            "action_ts": "",
        }
        await respond(
            stopped["response_url"],
            text="Stopping the run.",
            response_type="ephemeral",
            replace_original=True,
        )
        [replaced] = (await page.state("alice"))["ephemeral"]
        assert replaced["id"] == stop["id"] and replaced["text"] == "Stopping the run."
        assert replaced["blocks"] is None
        await respond(stopped["response_url"], delete_original=True)
        assert (await page.state("alice"))["ephemeral"] == []

        # A click's answer that does not replace shows as a new "only visible to you".
        await respond(click["response_url"], text="Thanks", replace_original=False)
        [thanks] = (await page.state("alice"))["ephemeral"]
        assert (thanks["text"], thanks["thread_ts"]) == ("Thanks", thread)
        # replace_original on a message in the channel changes the message itself.
        await respond(click["response_url"], text="Rated", replace_original=True)
        assert workspace.api.messages[(CHANNEL, answer["ts"])].text == "Rated"


async def test_the_state_waits_for_something_new_when_asked(tmp_path: Path) -> None:
    async with standin(tmp_path / "data") as (workspace, _, page):
        bot = await as_bot(workspace, page)
        thread = await thread_by(page)
        await settle(workspace)  # delivered: the outbox is empty again
        seen = (await page.state())["etag"]
        assert (await page.state())["etag"] == seen  # nothing changed

        async def wait_for_news() -> dict[str, Any]:
            async with page.http.get(
                f"{page.url}/ui/state",
                params={"user": "alice", "seen": seen},
                headers={"X-Standin-Token": page.token},
            ) as r:
                return dict(await r.json())

        waiting = asyncio.create_task(wait_for_news())
        done, _ = await asyncio.wait({waiting}, timeout=0.5)
        assert not done  # still waiting: nothing is new
        await bot.assistant_threads_setStatus(
            channel_id=CHANNEL, thread_ts=thread, status="is thinking…"
        )
        news = await asyncio.wait_for(waiting, 2)
        assert news["etag"] != seen
        assert news["threads"][0]["status"]["text"] == "agent is thinking…"


async def test_the_harness_presses_thumbs_and_ephemeral_buttons_like_slack() -> None:
    """testkit's `Harness.press`, for the bot's own tests: against a recording bot."""
    api = SlackWebApi(team="T0LOCAL")
    port = free_port()
    async with running_api(api) as api_url, fake_bot(port) as fake:
        harness = Harness(
            api, api_url, f"http://127.0.0.1:{port}", cast(Any, None), cast(Any, None)
        )
        try:
            answer = Message(CHANNEL, "2.000001", "It is 13:00.", api.bot_user, "1.000001")
            answer.blocks = [{"type": "markdown", "text": "It is 13:00."}, FEEDBACK]
            stop = Message(CHANNEL, "2.000002", "", api.bot_user, "1.000001", STOP)
            stop.ephemeral_to = USERS["alice"]
            thumbs_down = await harness.press(answer, "answer_feedback", "U1", thumb="negative")
            assert thumbs_down[0] == 200
            status, token = await harness.press(stop, "stop_run", "U1")
            assert status == 200 and token
        finally:
            await harness.close()
    thumb, stopped = clicks(fake, SECRET)
    assert thumb["actions"][0] | {"action_ts": ""} == {
        "action_id": "answer_feedback",
        "block_id": "b1",
        "type": "feedback_buttons",
        "value": "bad-1",
        "action_ts": "",
    }
    assert thumb["container"]["thread_ts"] == "1.000001" and "message" in thumb
    assert stopped["container"]["is_ephemeral"] and "message" not in stopped
    assert stopped["response_url"].endswith(f"/respond/{token}")
