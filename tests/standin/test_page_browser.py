"""The page draws Slack's agent surface in a real browser (Debian's Chromium via Playwright),
with the bot played through the Web API stand-in: the status line with its loading message,
a reply growing as it streams, task steps ticking, Markdown drawn safely (text that looks
like HTML stays text), 👍 clicked and delivered, and the ephemeral Stop control clicked and
replaced by the answer to its response_url. A screenshot goes to test-artifacts/."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from playwright.async_api import Page as BrowserPage
from playwright.async_api import async_playwright, expect
from slack_sdk.web.async_client import AsyncWebClient

from bot.standin.emoji import SHORTCODES
from bot.standin.view import CHANNEL
from bot.standin.workspace import USERS, Workspace
from tests.standin.test_emoji import bot_shortcodes
from tests.standin.test_local_mode_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS
from tests.standin.test_page_endpoints import FakeBot, settle, standin
from tests.standin.test_page_view import FEEDBACK, STOP, clicks, respond, thread_by

pytestmark = pytest.mark.slow
TRAP = "<img src=x onerror=\"document.title='pwned'\"> <b>not bold</b> &lt;i&gt;"


class Opened(NamedTuple):
    workspace: Workspace
    fake: FakeBot
    bot: AsyncWebClient  # the bot's Web API client, on the stand-in
    thread: str  # a thread alice started
    page: BrowserPage


@asynccontextmanager
async def opened_page(tmp_path: Path) -> AsyncIterator[Opened]:
    """The stand-in with a fake bot, a thread alice started, and the page open in Chromium."""
    async with (
        standin(tmp_path / "data") as (workspace, fake, client),
        async_playwright() as playwright,
    ):
        bot = AsyncWebClient(token=workspace.bot_token, base_url=f"{client.url}/api/")
        thread = await thread_by(client)
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1000, "height": 800})
            await page.goto(client.url)
            yield Opened(workspace, fake, bot, thread, page)
        finally:
            await browser.close()


async def test_the_page_draws_status_streams_tasks_markdown_and_clicks(tmp_path: Path) -> None:
    async with opened_page(tmp_path) as (workspace, fake, bot, thread, page):
        await expect(page.locator(".thread")).to_have_count(1)
        # The header names the agent the bot runs (BOT_AGENT, as the bot child gets it).
        named = "agent: " + workspace.supervisor.child.agent().removesuffix(":build_agent")
        await expect(page.locator("#agent")).to_have_text(named)

        await bot.assistant_threads_setStatus(
            channel_id=CHANNEL,
            thread_ts=thread,
            status="is thinking…",
            loading_messages=["Reading the conversation…"],
        )
        status = page.locator(".thread .status-line")
        await expect(status).to_have_text("agent is thinking…Reading the conversation…")

        started = await bot.chat_startStream(
            channel=CHANNEL,
            thread_ts=thread,
            recipient_team_id=workspace.api.team,
            recipient_user_id=USERS["alice"],
            chunks=[
                {"type": "markdown_text", "text": f"Looking **now**. {TRAP}"},
                {
                    "type": "task_update",
                    "id": "c1",
                    "title": "current_time",
                    "status": "in_progress",
                },
            ],
        )
        reply = page.locator(".msg.bot.streaming")
        await expect(reply).to_contain_text(f"Looking now. {TRAP[:-12]}")
        await expect(reply.locator("b")).to_have_text("now")  # Markdown bold, nothing else
        await expect(reply.locator(".cursor")).to_have_count(1)
        await expect(reply.locator(".task.running")).to_contain_text("current_time")
        await expect(status).to_have_count(0)  # the reply cleared it
        ts = started["ts"]
        await bot.chat_appendStream(
            channel=CHANNEL,
            ts=ts,
            chunks=[
                {
                    "type": "task_update",
                    "id": "c1",
                    "title": "current_time",
                    "status": "complete",
                },
                {"type": "markdown_text", "text": "\n\nIt is *13:00*:\n\n- in Oslo\n- today"},
            ],
        )
        await expect(reply.locator(".task.done .mark")).to_have_text("✓")
        await expect(reply.locator("li")).to_have_count(3)  # the task and two items
        await bot.chat_stopStream(
            channel=CHANNEL,
            ts=ts,
            blocks=[{"type": "markdown", "text": "```\nprint('<b>')\n```"}, FEEDBACK],
        )
        answer = page.locator(".msg.bot", has_text="in Oslo")
        await expect(answer.locator(".cursor")).to_have_count(0)
        await expect(answer.locator("pre")).to_have_text("print('<b>')")
        # Nothing the messages said became HTML.
        await expect(page.locator("main img")).to_have_count(0)
        await expect(answer.locator("i")).to_have_text("13:00")
        assert "pwned" not in await page.title()

        good = answer.get_by_role("button", name="Mark as a good answer")
        await good.click()
        await expect(good).to_have_attribute("aria-pressed", "true")
        await expect(good).to_have_class("thumb positive chosen")
        await settle(workspace)
        [click] = clicks(fake, workspace.secret)
        assert click["actions"][0]["type"] == "feedback_buttons"
        assert click["actions"][0]["value"] == "good-1"

        # The run works again (a Stop offer shows only while it does).
        await bot.assistant_threads_setStatus(
            channel_id=CHANNEL, thread_ts=thread, status="is working…"
        )
        await bot.chat_postEphemeral(
            channel=CHANNEL, user=USERS["alice"], thread_ts=thread, text="Working", blocks=STOP
        )
        only_you = page.locator(".thread .ephemeral")
        await only_you.get_by_role("button", name="Stop").click()
        await settle(workspace)
        stop = clicks(fake, workspace.secret)[-1]
        assert stop["actions"][0]["action_id"] == "stop_run"
        assert stop["container"]["is_ephemeral"] is True
        await respond(stop["response_url"], text="Stopping the run.", replace_original=True)
        await expect(only_you).to_contain_text("Stopping the run.")
        await expect(only_you.get_by_role("button", name="Stop")).to_have_count(0)
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "local-mode-agent-surface.png"))


SLACK_TEXT = (
    "AT&amp;T said &lt;b&gt;hi&lt;/b&gt; and &amp;lt; to <@U0ALICE> :white_check_mark: "
    "`*not bold* &amp; _x_` then *bold*\n```*still* _plain_ &lt;z&gt;```\n" + "x" * 300
)
HOME = [
    {"type": "header", "text": {"type": "plain_text", "text": "Admin"}},
    {
        "type": "section",
        "text": {"type": "mrkdwn", "text": "A stale thread · interrupted"},
        "accessory": {
            "type": "button",
            "action_id": "home_discard",
            "style": "danger",
            "text": {"type": "plain_text", "text": "Discard"},
            "value": "T0LOCAL:C0GENERAL:1.1",
            "confirm": {
                "title": {"type": "plain_text", "text": "Discard this conversation?"},
                "text": {"type": "plain_text", "text": "This cannot be undone."},
                "confirm": {"type": "plain_text", "text": "Discard"},
                "deny": {"type": "plain_text", "text": "Cancel"},
            },
        },
    },
]


def events(bot: FakeBot) -> list[dict[str, Any]]:
    return [json.loads(body)["event"] for _, body in bot.received if body.startswith('{"token"')]


COLOURED = """() => {
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = 40;
  const g = canvas.getContext("2d");
  g.font = "32px " + getComputedStyle(document.body).fontFamily;
  g.fillText("\\u2705", 2, 34);
  const px = g.getImageData(0, 0, 40, 40).data;
  for (let i = 0; i < px.length; i += 4) {
    const [r, g2, b] = [px[i], px[i + 1], px[i + 2]];
    if (px[i + 3] > 0 && Math.max(r, g2, b) - Math.min(r, g2, b) > 60) return true;
  }
  return false;
}"""


async def test_slack_text_is_decoded_once_code_is_literal_words_wrap_and_offers_go_stale(
    tmp_path: Path,
) -> None:
    """Slack's escaping decoded exactly once, nothing formatted inside code, a mention shown
    by name, a 300-letter word wrapped inside its thread, emoji drawn in colour (an emoji
    font), the bot's Stop offer shown only while its run works (a newer one replaces it),
    and a Home view's button behind a confirmation, sent from the view once confirmed."""
    async with opened_page(tmp_path) as (workspace, fake, bot, thread, page):
        await bot.chat_postMessage(channel=CHANNEL, thread_ts=thread, text=SLACK_TEXT)
        said = page.locator(".msg.bot", has_text="AT&T")
        await expect(said).to_contain_text("AT&T said <b>hi</b> and &lt; to @alice ✅")
        await expect(said.locator("code")).to_have_text("*not bold* & _x_")
        await expect(said.locator("pre")).to_have_text("*still* _plain_ <z>")
        await expect(said.locator("code b, code i, pre b, pre i")).to_have_count(0)
        await expect(said.locator("b", has_text="bold")).to_have_text("bold")
        thread_box = page.locator(".thread")
        wide = await thread_box.evaluate("t => t.scrollWidth > t.clientWidth")
        assert not wide  # the long word wraps
        assert await page.evaluate(COLOURED)  # ✅ in colour, not an empty box
        # Every shortcode the bot writes is drawn as its emoji, as Slack draws it.
        codes = " ".join(f":{name}:" for name in sorted(bot_shortcodes()))
        await bot.chat_postMessage(channel=CHANNEL, thread_ts=thread, text=f"codes {codes}")
        drawn = page.locator(".msg.bot", has_text="codes ")
        await expect(drawn).to_contain_text(
            "codes " + " ".join(SHORTCODES[name] for name in sorted(bot_shortcodes()))
        )

        await bot.assistant_threads_setStatus(
            channel_id=CHANNEL, thread_ts=thread, status="is working…"
        )
        for _ in range(2):
            await bot.chat_postEphemeral(
                channel=CHANNEL, user=USERS["alice"], thread_ts=thread, text="W", blocks=STOP
            )
        offers = page.locator(".thread .ephemeral", has_text="Changed your mind")
        await expect(offers).to_have_count(1)  # the newer offer replaced the first
        await page.screenshot(path=str(ARTIFACTS / "local-mode-rendering.png"))
        await bot.chat_postMessage(channel=CHANNEL, thread_ts=thread, text="Done.")
        await expect(page.locator(".status-line")).to_have_count(0)
        await expect(offers).to_have_count(0)  # the run ended: nothing left to stop

        # A Home view's button behind a confirmation (an admin's Discard): asked in a
        # dialog, sent from the view only once confirmed.
        await bot.views_publish(user_id=USERS["alice"], view={"type": "home", "blocks": HOME})
        await page.get_by_role("tab", name="Home").click()
        discard = page.locator("#home").get_by_role("button", name="Discard")
        await discard.click()
        dialog = page.get_by_role("dialog")
        await expect(dialog).to_contain_text("Discard this conversation?")
        await dialog.get_by_role("button", name="Cancel").click()
        await expect(dialog).to_be_hidden()
        await discard.click()
        await dialog.get_by_role("button", name="Discard").click()
        await settle(workspace)
        [opened, *_] = [c for c in events(fake) if c.get("type") == "app_home_opened"]
        assert opened["tab"] == "home" and opened["user"] == USERS["alice"]
        [sent] = [c for c in clicks(fake, workspace.secret) if c["container"]["type"] == "view"]
        assert sent["actions"][0]["action_id"] == "home_discard"
        assert sent["actions"][0]["value"] == "T0LOCAL:C0GENERAL:1.1"
        assert len(clicks(fake, workspace.secret)) == 1  # Cancel sent nothing
