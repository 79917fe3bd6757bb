"""Local mode in a real browser: headless Chromium from Debian's packages, driven by
Playwright (never a browser download). A person mentions the bot, approves the tool,
restarts the bot mid-run, and sees the resume notice and the answer; in a long channel,
answers meant for one person show where they typed the command; thread links stay on the
page and work with /resume; a message sent during a restart arrives. Screenshots are saved
in test-artifacts/."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect, sync_playwright

from testkit.services import ROOT, free_port, local_mode_process, wait_until

ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LINK = re.compile(r"https://local\.slack\.com/archives/C0GENERAL/p\d{16}")
pytestmark = pytest.mark.slow


def local_env(tmp_path: Path, port: int, delay: str, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PORT": str(port),
        "BOT_LOCAL_BOT_PORT": str(free_port()),
        "BOT_DATA_DIR": str(tmp_path / "data"),
        "BOT_DEMO_DELAY": delay,
        "BOT_STORAGE": "local",
        **extra,
    }
    for name in ("OPENAI_API_KEY", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "BOT_TABLE"):
        env.pop(name, None)
    return env


@contextmanager
def local_mode(tmp_path: Path, delay: str, **extra: str) -> Iterator[str]:
    """`python -m bot` in local mode; its terminal output goes to tmp_path/local.log."""
    port = free_port()
    env = local_env(tmp_path, port, delay, **extra)
    with local_mode_process(env, tmp_path / "local.log") as process:
        # The page is up before a browser opens it (seconds on a loaded machine: opened
        # sooner, the browser is refused).
        wait_until(lambda: page_listens(process, port), seconds=60)
        yield f"http://127.0.0.1:{port}"


def page_listens(process: subprocess.Popen[bytes], port: int) -> bool:
    assert process.poll() is None, "local mode exited"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def browser_page(url: str) -> Iterator[Page]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(
            viewport={"width": 1100, "height": 900},
            permissions=["clipboard-read", "clipboard-write"],
        )
        page = context.new_page()
        try:
            page.goto(url)
            expect(page.locator("#model")).to_have_text("offline demo model")
            expect(page.locator("#bot-state")).to_have_text("bot: running", timeout=90_000)
            yield page
        finally:
            browser.close()


def send(page: Page, text: str, box: Locator | None = None) -> None:
    box = box or page.locator("#text")
    box.fill(text)
    box.press("Enter")
    expect(box).to_have_value("", timeout=10_000)  # cleared once the stand-in has it


def above_the_message_box(page: Page, locator: Locator) -> None:
    """Visible, and not under the fixed message box at the bottom."""
    expect(locator).to_be_in_viewport(timeout=10_000)
    box = locator.bounding_box()
    footer = page.locator("footer").bounding_box()
    assert box is not None and footer is not None
    assert box["y"] + box["height"] <= footer["y"] + 1, (box, footer)


def screenshot(page: Page, name: str, *, full_page: bool = False) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=full_page)


def test_mention_approve_restart_resume(tmp_path: Path) -> None:
    with local_mode(tmp_path, delay="2") as url, browser_page(url) as page:
        send(page, "@agent file a ticket about the printer")
        approve = page.get_by_role("button", name="Approve")
        expect(approve).to_be_visible(timeout=30_000)
        expect(page.get_by_text("Approval needed")).to_be_visible()
        expect(page.locator("#hint")).to_contain_text("Approvers (alice)")
        approve.click()
        # The card itself says who decided what (its buttons gone), and nothing repeats it.
        decided = page.locator(".msg.bot", has_text="file_ticket approved by @alice")
        expect(decided).to_be_visible(timeout=30_000)
        expect(page.locator(".msg.bot", has_text="approved by @alice")).to_have_count(1)
        expect(page.get_by_role("button", name="Approve")).to_have_count(0)
        # The tool ran (its step is shown done only once the ledger holds its result); the
        # model is still "thinking": kill the bot process now.
        expect(page.locator(".task.done", has_text="file_ticket")).to_be_visible(timeout=30_000)
        page.get_by_role("button", name="Restart bot").click()
        # The page says what is going on while the new process starts and resumes.
        expect(page.locator("#banner")).to_be_visible(timeout=5_000)
        expect(page.locator(".thread .recovering")).to_be_visible(timeout=10_000)
        expect(page.get_by_text("resuming where I left off")).to_be_visible(timeout=60_000)
        expect(page.get_by_text("Done: Filed ticket 'the printer'.")).to_be_visible(timeout=30_000)
        expect(page.locator("#bot-state")).to_have_text("bot: running", timeout=90_000)
        expect(page.locator("#banner")).to_be_hidden()
        screenshot(page, "local-mode.png", full_page=True)
    tickets = (tmp_path / "data" / "tickets.jsonl").read_text().splitlines()
    assert len(tickets) == 1  # filed once, across the crash
    # The terminal names the URL; the log has one line for the restart, and the bot's
    # start-up lines are not written again.
    assert (tmp_path / "local.log").read_text().splitlines() == [f"local mode: open {url}"]
    log = (tmp_path / "data" / "local-mode.log").read_text()
    [restarted] = [line for line in log.splitlines() if "bot restarted" in line]
    assert "resuming 1 interrupted conversation" in restarted
    assert log.count("bot: serving Slack") == 1


CITIES = ["Oslo", "Lima", "Tokyo", "Paris", "Sydney", "Cairo", "Denver", "Seoul", "Dublin", "Lagos"]


def test_a_long_channel_answers_where_you_typed_and_links_stay_here(tmp_path: Path) -> None:
    with local_mode(tmp_path, delay="0.1") as url, browser_page(url) as page:
        for city in CITIES:
            send(page, f"@agent what time is it in {city}?")
        threads = page.locator(".thread")
        expect(threads).to_have_count(len(CITIES), timeout=30_000)
        expect(page.locator(".thread .msg.bot", has_text=" in Lagos (")).to_have_count(1)
        expect(page.locator(".thread .msg.bot")).to_have_count(len(CITIES), timeout=30_000)
        # The newest thread was brought into view, above the message box.
        above_the_message_box(page, threads.last)
        height = page.evaluate("document.documentElement.scrollHeight")
        assert height > 1.5 * 900, height

        # A command typed in the message box: its answer shows near the box, brought into
        # view even when the page was scrolled up to the first thread.
        page.evaluate("window.scrollTo(0, 0)")
        send(page, "/agent-admin status")
        answer = page.locator("#here .ephemeral")
        expect(answer).to_contain_text("Conversations by status", timeout=30_000)
        above_the_message_box(page, answer)
        screenshot(page, "local-mode-ephemeral.png")
        answer.get_by_role("button", name="Dismiss").click()
        expect(answer).to_have_count(0)

        # A command typed in a thread's reply box: its answer shows in that thread.
        third = threads.nth(2)
        send(page, "/resume", third.locator(".reply-box input"))
        in_thread = third.locator(".ephemeral")
        expect(in_thread).to_contain_text("Nothing is paused here", timeout=30_000)
        above_the_message_box(page, in_thread)
        in_thread.get_by_role("button", name="Dismiss").click()

        # A thread waiting for approval: copy its link, scroll away, /resume <link>.
        send(page, "@agent file a ticket about the coffee machine")
        ticket = page.locator(".thread", has_text="file a ticket about the coffee machine")
        expect(ticket.get_by_role("button", name="Approve")).to_be_visible(timeout=30_000)
        ticket.locator(".copy-link").click()
        expect(page.locator("#toast")).to_contain_text("Link copied")
        link = page.evaluate("navigator.clipboard.readText()")
        assert LINK.fullmatch(link), link
        assert ticket.locator(".copy-link").get_attribute("data-link") == link
        page.evaluate("window.scrollTo(0, 0)")

        send(page, "/resume")  # the list names threads by their first words, not by ids
        listed = page.locator("#here .ephemeral")
        expect(listed).to_contain_text("“file a ticket about the coffee machine”", timeout=30_000)
        expect(listed).not_to_contain_text("Thread 1")
        listed.get_by_role("button", name="Dismiss").click()

        send(page, f"/resume {link}")
        resumed = page.locator("#here .ephemeral", has_text="waiting for a decision")
        expect(resumed).to_be_visible(timeout=30_000)
        above_the_message_box(page, resumed)
        to_thread = resumed.locator("a.thread-link")
        expect(to_thread).to_contain_text("file a ticket about the coffee machine")
        expect(ticket.get_by_role("button", name="Approve")).to_have_count(1)  # not posted again
        to_thread.click()  # stays on the page: scrolls to the thread and highlights it
        assert page.url.startswith(url)
        expect(ticket).to_have_class(re.compile(r"\bhighlight\b"))
        expect(ticket).to_be_in_viewport()

        send(page, f"/agent-admin discard {link}")
        discarded = page.locator("#here .ephemeral", has_text="removed its checkpoint")
        expect(discarded).to_be_visible(timeout=30_000)
        expect(discarded).to_contain_text("“file a ticket about the coffee machine”")
        expect(discarded).not_to_contain_text("T0LOCAL:")
        expect(ticket).to_contain_text("discarded this conversation's saved state")

        # alice is an approver: she may approve bob's request too.
        page.select_option("#user", "bob")
        send(page, "@agent file a ticket about the stapler")
        page.select_option("#user", "alice")
        stapler = page.locator(".thread", has_text="file a ticket about the stapler")
        stapler.get_by_role("button", name="Approve").click(timeout=30_000)
        expect(stapler).to_contain_text("file_ticket approved by @alice", timeout=30_000)
        expect(stapler).to_contain_text("Done: Filed ticket 'the stapler'.", timeout=30_000)


def test_a_message_sent_while_the_bot_restarts_is_delivered(tmp_path: Path) -> None:
    with local_mode(tmp_path, delay="0.1") as url, browser_page(url) as page:
        page.get_by_role("button", name="Restart bot").click()
        expect(page.locator("#banner")).to_contain_text("Messages you send now are kept")
        send(page, "@agent what time is it in Tokyo?")
        expect(page.locator(".msg.pending")).to_contain_text("not delivered yet")
        screenshot(page, "local-mode-restarting.png")
        expect(page.locator(".msg.bot", has_text=" in Tokyo (")).to_be_visible(timeout=60_000)
        expect(page.locator(".msg.pending")).to_have_count(0)
        expect(page.locator("#bot-state")).to_have_text("bot: running", timeout=90_000)


class PageClient:
    """What the page does, without a browser: its token and its user names."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.token = ""

    def _open(self, path: str, body: dict[str, Any] | None = None) -> Any:
        if not self.token:
            with urllib.request.urlopen(self.url, timeout=5) as response:
                page = response.read().decode()
            found = re.search(r'name="standin-token" content="([^"]+)"', page)
            assert found
            self.token = found.group(1)
        headers = {"X-Standin-Token": self.token, "Content-Type": "application/json"}
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}{path}", data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    def state(self) -> dict[str, Any]:
        return dict(self._open("/ui/state?user=alice"))

    def post(self, text: str, thread_ts: str | None = None) -> None:
        self._open("/ui/post", {"user": "alice", "text": text, "thread_ts": thread_ts})

    def replies(self) -> list[str]:
        return [r["text"] for t in self.state()["threads"] for r in t["replies"]]


def test_ctrl_c_and_run_again_keeps_the_conversation(tmp_path: Path) -> None:
    port = free_port()
    env = local_env(tmp_path, port, "0.2")
    page = PageClient(f"http://127.0.0.1:{port}")

    first = subprocess.Popen([sys.executable, "-m", "bot"], env=env)
    try:
        wait_until(lambda: page.state()["bot"] == "running")
        page.post("@agent what time is it in Oslo?")
        wait_until(lambda: any(" in Oslo (" in r for r in page.replies()))
    finally:
        first.send_signal(signal.SIGINT)
        assert first.wait(20) == 0
    page = PageClient(page.url)  # a new stand-in, a new page token
    second = subprocess.Popen([sys.executable, "-m", "bot"], env=env)
    try:
        wait_until(lambda: page.state()["bot"] == "running")
        assert any(" in Oslo (" in r for r in page.replies())  # the channel is still there
        threads = page.state()["threads"]
        # A reply continues the same conversation.
        page.post("what time is it in Lima?", threads[0]["ts"])
        wait_until(lambda: any(" in Lima (" in r for r in page.replies()))
    finally:
        second.send_signal(signal.SIGINT)
        second.wait(20)


def test_status_streamed_answer_feedback_and_stop(tmp_path: Path) -> None:
    """The agent experience in local mode: the thread's agent session while the model
    thinks (screenshot), the answer appearing word by word (screenshot mid-stream), the
    complete answer with feedback buttons (screenshot), 👍 delivered to the bot and counted.
    Slack's stop on the session: test_container_browser."""
    with (
        local_mode(tmp_path, delay="2.5", BOT_DEMO_WORD_DELAY="0.12") as url,
        browser_page(url) as page,
    ):
        send(page, "@agent hello, what can you do?")
        thread = page.locator(".thread", has_text="what can you do")
        session = thread.locator(".session")
        expect(session).to_contain_text("agent is working", timeout=30_000)
        screenshot(page, "local-mode-status.png")
        streaming = thread.locator(".msg.bot.streaming")
        expect(streaming).to_contain_text("I can tell the time", timeout=30_000)
        partial = streaming.inner_text()
        screenshot(page, "local-mode-streaming.png")
        answer = thread.locator(".msg.bot", has_text="what time is it in Oslo?")
        expect(answer.locator(".thumb.positive")).to_be_visible(timeout=30_000)
        expect(thread.locator(".msg.bot.streaming")).to_have_count(0)
        expect(session).to_have_count(0)  # closed once the answer is complete
        assert len(answer.inner_text()) > len(partial)  # the first screenshot was mid-stream
        screenshot(page, "local-mode-answer.png")

        good = answer.locator(".thumb.positive")
        value = good.get_attribute("data-value")
        good.click()
        expect(good).to_have_attribute("aria-pressed", "true")
        client = PageClient(url)

        def answered() -> list[int]:
            return [c["status"] for c in client.state()["clicks"] if c["value"] == value]

        wait_until(lambda: answered() == [200])  # the bot took the signed block_actions
        send(page, "/agent-admin status")  # and kept the verdict
        expect(page.locator("#here .ephemeral")).to_contain_text(
            re.compile(r"Feedback on answers: 1\b"), timeout=30_000
        )


def test_install_a_second_workspace_and_use_it(tmp_path: Path) -> None:
    """BOT_LOCAL_OAUTH=1: the page switches between two workspaces; the second is installed
    from its Install link (the bot's install page, "Add to Slack", the stand-in's consent
    page, back to the page) and answers there; the first is still to be installed."""
    with (
        local_mode(tmp_path, delay="0", BOT_LOCAL_OAUTH="1") as url,
        browser_page(url) as page,
    ):
        expect(page.locator("#workspace-pick")).to_be_visible(timeout=10_000)
        page.select_option("#workspace", "T0SECOND")
        expect(page.locator("#channel-name")).to_have_text("# second")
        install = page.locator("#install-link")
        expect(install).to_be_visible(timeout=10_000)
        install.click()
        page.locator("a[href*='oauth/v2/authorize']").click()
        page.wait_for_url(url + "/", timeout=30_000)  # back on the page once installed
        expect(page.locator("#workspace")).to_have_value("T0SECOND")
        expect(page.locator("#install")).to_be_hidden(timeout=10_000)
        send(page, "@agent hello from the second workspace")
        thread = page.locator(".thread", has_text="hello from the second workspace")
        expect(thread.locator(".msg.bot")).not_to_have_count(0, timeout=30_000)
        expect(thread.locator(".msg.bot.streaming")).to_have_count(0, timeout=30_000)
        screenshot(page, "local-mode-second-workspace.png")
        page.select_option("#workspace", "T0LOCAL")
        expect(page.locator("#channel-name")).to_have_text("# general")
        expect(page.locator("#install-link")).to_be_visible(timeout=10_000)
        expect(page.locator(".thread", has_text="second workspace")).to_have_count(0)
