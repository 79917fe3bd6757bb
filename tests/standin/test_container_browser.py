"""Slack's agent container in local mode, in a real browser (Debian's Chromium via
Playwright), with the real bot behind the stand-in: the app's DM greets with suggested
prompts under it (the greeting a message, not a conversation), a prompt clicked is sent, its
conversation opened and titled, the other prompts still on offer; its approval is listed on the Home
tab and Approve there runs the tool once, announced once in the thread; Slack's stop on a
working session ends the run; the demo model names people and answers about files instead
of filing tickets; the terminal names only the URL. Screenshots go to test-artifacts/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import FilePayload, expect

from tests.standin.test_local_mode_browser import browser_page, local_mode, screenshot, send

pytestmark = pytest.mark.slow


def test_dm_prompts_title_home_approve_session_stop_names_and_files(tmp_path: Path) -> None:
    with (
        local_mode(tmp_path, delay="0.3", BOT_DEMO_WORD_DELAY="0.15") as url,
        browser_page(url) as page,
    ):
        # The app's Messages tab: the greeting once, a message (not a conversation of its
        # own with a reply box), the agent module's prompts under it.
        page.get_by_role("tab", name="agent").click()
        greeting = page.locator(".greeting", has_text="file tickets for the team")
        expect(greeting).to_be_visible(timeout=15_000)
        expect(page.locator(".thread", has_text="file tickets for the team")).to_have_count(0)
        prompts = greeting.locator(".prompts")
        expect(prompts.get_by_role("button")).to_have_text(["Time in Tokyo", "File a ticket"])
        screenshot(page, "local-mode-dm.png")
        prompts.get_by_role("button", name="File a ticket").click()
        # The prompt opens the conversation it started; the others stay on offer.
        ticket = page.locator(".thread", has_text="the printer on floor 3 is jammed")
        expect(ticket).to_be_visible(timeout=15_000)
        opened = ticket.get_attribute("id")
        expect(page).to_have_url(re.compile(f"#{opened}$"))
        expect(ticket).to_be_in_viewport()
        expect(prompts.get_by_role("button")).to_have_text(["Time in Tokyo"])
        expect(ticket.locator(".thread-title")).to_contain_text("File a ticket", timeout=15_000)
        expect(ticket.get_by_role("button", name="Approve")).to_be_visible(timeout=15_000)
        expect(ticket.locator(".session")).to_contain_text("waiting for a decision")

        # The Home tab lists it; Approve there runs the tool, once.
        page.get_by_role("tab", name="Home").click()
        home = page.locator("#home")
        expect(home).to_contain_text("Approval needed: file_ticket", timeout=15_000)
        screenshot(page, "local-mode-home.png")
        home.get_by_role("button", name="Approve").click()
        expect(home).to_contain_text("Nothing is waiting on you.", timeout=15_000)
        page.get_by_role("tab", name="agent").click()
        expect(ticket).to_contain_text("Done: Filed ticket", timeout=15_000)
        # The thread's card says the decision taken on Home, once.
        decided = ticket.locator(".msg.bot", has_text="file_ticket approved by @alice")
        expect(ticket.locator(".msg.bot", has_text="approved by @alice")).to_have_count(1)
        expect(decided).to_have_count(1)
        expect(decided.get_by_role("button", name="Approve")).to_have_count(0)
        tickets = (tmp_path / "data" / "tickets.jsonl").read_text().splitlines()
        assert [json.loads(t)["requested_by"] for t in tickets] == ["U0ALICE"]  # filed once

        # Slack's stop, on the session from the start of the run.
        page.get_by_role("tab", name="# general").click()
        send(page, "@agent hello, what can you do?")
        thread = page.locator(".thread", has_text="hello, what can you do")
        stop = thread.locator(".session").get_by_role("button", name="Stop")
        expect(stop).to_be_visible(timeout=15_000)
        screenshot(page, "local-mode-session.png")
        stop.click()
        expect(thread).to_contain_text("Stopped by @alice", timeout=15_000)
        expect(thread.locator(".session")).to_have_count(0, timeout=15_000)
        expect(thread.locator(".ephemeral", has_text="Stop")).to_have_count(0)

        # The demo model names people, and answers about files rather than filing tickets.
        send(page, "@agent who am I?")
        me = page.locator(".thread", has_text="who am I?").locator(".msg.bot")
        expect(me).to_contain_text("You are @alice", timeout=15_000)
        expect(me).not_to_contain_text("U0ALICE")
        notes: FilePayload = {
            "name": "notes.txt",
            "mimeType": "text/plain",
            "buffer": b"call the printer guy",
        }
        page.locator("#attach").set_input_files([notes])
        send(page, "@agent what is in this file?")
        files = page.locator(".thread", has_text="what is in this file?")
        expect(files.locator(".msg.bot")).to_contain_text("notes.txt", timeout=15_000)
        expect(files.get_by_role("button", name="Approve")).to_have_count(0)

    # The terminal names the URL; the details are in the log.
    terminal = (tmp_path / "local.log").read_text().splitlines()
    assert terminal == [f"local mode: open {url}"], terminal
    log = (tmp_path / "data" / "local-mode.log").read_text()
    assert "bot started: pid" in log and "bot: serving Slack" in log
