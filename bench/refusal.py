"""How soon the page answers a decision, for someone who may not decide and for someone who
may (issue 50's target: a refusal in under 1 s, in one wording whichever way it came).

A real local mode (`python -m bot`: the stand-in and the bot behind it, the demo agent on its
offline model) and its page in headless Chromium (Debian's, driven by Playwright). Each
round, alice asks for a ticket in a new thread; the page is switched to bob (who neither
asked nor approves) and, a moment later as a person would, he clicks Approve: measured from
the click to the refusal drawn on his page. Then he replies `approve` in the thread: from
Enter to that refusal drawn. Then the page is switched back to alice, who clicks Approve:
from the click to the card saying she approved it. The page waits for news with one long
request (up to 15 s): each figure includes whatever the page waited on."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import median, section, table
from testkit.services import ROOT, free_port, wait_until

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
HESITATION = 1.0  # seconds between switching the page to a person and their click
REFUSED = "can decide this one"


@contextmanager
def local_mode(data: Path) -> Iterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "BOT_LOCAL_BOT_PORT": str(free_port()),
        "BOT_DATA_DIR": str(data),
        "BOT_STORAGE": "local",
        "BOT_DEMO_DELAY": "0.2",
    }
    for name in ("OPENAI_API_KEY", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "BOT_TABLE", "BOT_AGENT"):
        env.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "bot"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: _listens(port), seconds=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def run_refusal(rounds: int = 3) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    times: dict[str, list[float]] = {"click refused": [], "reply refused": [], "click decided": []}
    with (
        tempfile.TemporaryDirectory() as tmp,
        local_mode(Path(tmp) / "data") as url,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.goto(url)
        page.locator("#bot-state", has_text="bot: running").wait_for(timeout=90_000)
        for number in range(rounds):
            page.select_option("#user", "alice")
            text = f"@agent file a ticket about printer {number}"
            page.locator("#text").fill(text)
            page.locator("#text").press("Enter")
            thread = page.locator(".thread", has_text=f"printer {number}")
            approve = thread.get_by_role("button", name="Approve")
            approve.wait_for(timeout=30_000)

            page.select_option("#user", "bob")
            time.sleep(HESITATION)
            refusals = thread.locator(".ephemeral", has_text=REFUSED)
            started = time.monotonic()
            approve.click()
            refusals.first.wait_for(timeout=30_000)
            times["click refused"].append(time.monotonic() - started)

            box = thread.locator(".reply-box input")
            box.fill("approve")
            started = time.monotonic()
            box.press("Enter")
            refusals.nth(1).wait_for(timeout=30_000)
            times["reply refused"].append(time.monotonic() - started)

            page.select_option("#user", "alice")
            time.sleep(HESITATION)
            decided = thread.locator(".msg.bot", has_text="approved by @alice")
            started = time.monotonic()
            approve.click()
            decided.wait_for(timeout=30_000)
            times["click decided"].append(time.monotonic() - started)
            thread.get_by_text("Done: Filed ticket").wait_for(timeout=30_000)
        browser.close()
    return times


def report(times: dict[str, list[float]]) -> dict[str, Any]:
    section(
        "A decision answered on local mode's page",
        "Local mode with the demo agent, its page in headless Chromium. Someone who may not "
        f"decide (bob) clicks Approve {HESITATION:.0f} s after the page was switched to him, "
        "then replies `approve`; the person who may (alice) then clicks Approve. Seconds "
        "from the click (or Enter) to the answer drawn on that person's page; target: a "
        "refusal in under 1 s.",
    )
    rows = [
        [what, f"{median(found):.2f}", f"{max(found):.2f}", str(len(found))]
        for what, found in times.items()
    ]
    print(table(["what", "median s", "slowest s", "rounds"], rows), flush=True)
    return {what: {"median_s": median(found), "max_s": max(found)} for what, found in times.items()}


if __name__ == "__main__":
    report(run_refusal())
