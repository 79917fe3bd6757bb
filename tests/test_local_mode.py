"""Local mode in a real browser: headless Chromium from Debian's packages, driven by
Playwright (never a browser download). A person mentions the bot, approves the tool,
restarts the bot mid-run, and sees the resume notice and the answer. Screenshot saved in
test-artifacts/."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from tests.services import free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent
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
pytestmark = pytest.mark.slow


@pytest.fixture
def local_bot(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "BOT_LOCAL_BOT_PORT": str(free_port()),
        "BOT_DATA_DIR": str(tmp_path / "data"),
        "BOT_DEMO_DELAY": "2",
        "BOT_STORAGE": "local",
    }
    for name in ("OPENAI_API_KEY", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "BOT_TABLE"):
        env.pop(name, None)
    log = (tmp_path / "local.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "bot"], env=env, stdout=log, stderr=log)
    try:
        yield f"http://127.0.0.1:{port}", tmp_path / "data"
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C: stops the stand-in and the bot
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
        if process.returncode not in (0, -signal.SIGINT):
            print((tmp_path / "local.log").read_text())


def test_mention_approve_restart_resume(local_bot: tuple[str, Path]) -> None:
    url, data_dir = local_bot
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page: Page = browser.new_page(viewport={"width": 1100, "height": 900})
        try:
            page.goto(url)
            expect(page.locator("#model")).to_have_text("offline demo model")
            expect(page.locator("#bot-state")).to_have_text("bot: running", timeout=30_000)
            page.fill("#text", "@agent file a ticket about the printer")
            page.press("#text", "Enter")
            approve = page.get_by_role("button", name="Approve")
            expect(approve).to_be_visible(timeout=30_000)
            expect(page.get_by_text("Approval needed")).to_be_visible()
            approve.click()
            # The buttons are replaced by who decided what.
            expect(page.locator(".context", has_text="Approved by @alice")).to_be_visible(
                timeout=30_000
            )
            expect(page.get_by_role("button", name="Approve")).to_have_count(0)
            # The tool ran; the model is still "thinking": kill the bot process now.
            page.get_by_role("button", name="Restart bot").click()
            expect(page.get_by_text("resuming where I left off")).to_be_visible(timeout=60_000)
            expect(page.get_by_text("Done: Filed ticket 'the printer'.")).to_be_visible(
                timeout=30_000
            )
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "local-mode.png"), full_page=True)
        finally:
            browser.close()
    tickets = (data_dir / "tickets.jsonl").read_text().splitlines()
    assert len(tickets) == 1  # filed once, across the crash


def _state(url: str) -> dict[str, object]:
    import json
    import urllib.request

    with urllib.request.urlopen(f"{url}/ui/state?user=U0ALICE", timeout=5) as response:
        return dict(json.loads(response.read()))


def test_ctrl_c_and_run_again_keeps_the_conversation(tmp_path: Path) -> None:
    import json
    import urllib.request

    port, bot_port = free_port(), free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "BOT_LOCAL_BOT_PORT": str(bot_port),
        "BOT_DATA_DIR": str(tmp_path / "data"),
        "BOT_DEMO_DELAY": "0.2",
        "BOT_STORAGE": "local",
    }
    for name in ("OPENAI_API_KEY", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "BOT_TABLE"):
        env.pop(name, None)
    url = f"http://127.0.0.1:{port}"

    def running() -> bool:
        return _state(url)["bot"] == "running"

    def replies() -> list[str]:
        threads = _state(url)["threads"]
        assert isinstance(threads, list)
        return [r["text"] for t in threads for r in t["replies"]]

    def post(text: str, thread_ts: str | None = None) -> None:
        body = json.dumps({"user": "U0ALICE", "text": text, "thread_ts": thread_ts}).encode()
        request = urllib.request.Request(
            f"{url}/ui/post", data=body, headers={"Content-Type": "application/json"}
        )
        urllib.request.urlopen(request, timeout=5).close()

    first = subprocess.Popen([sys.executable, "-m", "bot"], env=env)
    try:
        wait_until(running)
        post("@agent what time is it in Oslo?")
        wait_until(lambda: any("UTC" in r for r in replies()))
    finally:
        first.send_signal(signal.SIGINT)
        assert first.wait(20) == 0
    second = subprocess.Popen([sys.executable, "-m", "bot"], env=env)
    try:
        wait_until(running)
        assert any("UTC" in r for r in replies())  # the channel is still there
        threads = _state(url)["threads"]
        assert isinstance(threads, list)
        # A reply continues the same conversation.
        post("what time is it in Lima?", threads[0]["ts"])
        wait_until(lambda: sum("UTC" in r for r in replies()) == 2)
    finally:
        second.send_signal(signal.SIGINT)
        second.wait(20)
