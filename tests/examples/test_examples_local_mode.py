"""An example in local mode, as a newcomer tries it: `BOT_AGENT=examples.keyed_payments:
build_agent python -m bot` from the repository root, no OpenAI key. The page names the
agent; a charge is asked for and approved on the page, the bot is restarted (killed) while
the charge is in flight, and the new bot completes it with the same key: the thread says
so, and the payment book holds one payment."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from testkit.services import ROOT, free_port, local_mode_process, wait_until

pytestmark = pytest.mark.slow
AGENT = "examples.keyed_payments:build_agent"


class Page:
    """What page.html does: its token in every request, JSON both ways."""

    def __init__(self, url: str) -> None:
        self.url = url
        with urllib.request.urlopen(url, timeout=5) as response:
            html = response.read().decode()
        found = re.search(r'name="standin-token" content="([^"]+)"', html)
        assert found is not None
        self.token = found.group(1)

    def call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            headers={"X-Standin-Token": self.token, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
        return answer

    def state(self) -> dict[str, Any]:
        return self.call("/ui/state?user=alice")

    def thread(self) -> dict[str, Any]:
        threads: list[dict[str, Any]] = self.state()["threads"]
        assert len(threads) == 1
        return threads[0]


@contextmanager
def local_mode(tmp_path: Path, agent: str = AGENT) -> Iterator[Page]:
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "BOT_LOCAL_BOT_PORT": str(free_port()),
        "BOT_DATA_DIR": str(tmp_path / "data"),
        "BOT_STORAGE": "local",
        "BOT_AGENT": agent,
        "BOT_DEMO_DELAY": "0.1",
        "PAYMENTS_STANDIN_SECONDS": "4",  # the window in which the restart comes
    }
    for name in (
        "OPENAI_API_KEY",
        "SLACK_BOT_TOKEN",
        "SLACK_APP_TOKEN",
        "BOT_TABLE",
        "PYTHONPATH",
        "BOT_MODEL",
    ):
        env.pop(name, None)
    with local_mode_process(env, tmp_path / "local.log", cwd=ROOT):
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: urllib.request.urlopen(url, timeout=2), seconds=30)
        page = Page(url)
        wait_until(lambda: page.state()["bot"] == "running", seconds=60)
        yield page


def approve_button(thread: dict[str, Any]) -> dict[str, Any] | None:
    for reply in thread["replies"]:
        for block in reply.get("blocks") or []:
            for element in block.get("elements") or []:
                if element.get("action_id") == "approval_approve":
                    return {"ts": reply["ts"], **element}
    return None


def test_an_example_runs_in_local_mode_and_survives_a_restart(tmp_path: Path) -> None:
    payments = tmp_path / "data" / "payments.jsonl"
    with local_mode(tmp_path) as page:
        state = page.state()
        assert state["agent"] == AGENT and state["demo"] is True
        page.call("/ui/post", {"user": "alice", "text": "@agent charge 20 EUR to Acme for rent"})
        wait_until(lambda: approve_button(page.thread()), seconds=30)
        thread = page.thread()
        button = approve_button(thread)
        assert button is not None
        page.call(
            "/ui/click",
            {
                "user": "alice",
                "ts": button["ts"],
                "thread_ts": thread["ts"],
                "action_id": button["action_id"],
                "value": button["value"],
                "label": "Approve",
            },
        )
        wait_until(payments.exists, seconds=30)  # booked; the service has not answered yet
        page.call("/ui/restart", {})

        def said() -> str:
            return json.dumps(page.thread())

        wait_until(lambda: "payment pay-1 (the service had it already" in said(), seconds=60)
        assert "run again with the same idempotency key" in said()
    assert len(payments.read_text().splitlines()) == 1
    # The terminal names only the URL; the restart is in local mode's log.
    assert "bot restarted" not in (tmp_path / "local.log").read_text()
    assert "bot restarted" in (tmp_path / "data" / "local-mode.log").read_text()


def test_an_agent_that_needs_a_key_says_so_at_start(tmp_path: Path) -> None:
    """One's own agent, no model of its own, no key: the page and the terminal say at start
    that OPENAI_API_KEY is missing and how to run it offline."""
    with local_mode(tmp_path, "examples.first_agent:build_agent") as page:
        wait_until(lambda: page.state()["model_warning"], seconds=30)
        state = page.state()
        assert state["model"] == "OpenAI model: no OPENAI_API_KEY"
        assert "agent 'assistant' runs on OpenAI's model" in state["model_warning"]
        assert "BOT_MODEL=offline" in state["model_warning"]
        terminal = tmp_path / "local.log"
        wait_until(lambda: "OPENAI_API_KEY is not set" in terminal.read_text(), seconds=10)
    lines = (tmp_path / "local.log").read_text().splitlines()
    assert lines[0].startswith("local mode: open http://127.0.0.1:")
    assert lines[1].startswith("local mode: OPENAI_API_KEY is not set, and agent 'assistant'")
    assert "BOT_MODEL=offline" in lines[1]


def test_the_page_shows_which_agent_asks_for_an_approval(tmp_path: Path) -> None:
    """examples.support_desk offline: `triage` hands a large refund off to `billing`, whose
    refund waits for a person; the card on the page names `billing`."""
    with local_mode(tmp_path, "examples.support_desk:build_agent") as page:
        page.call(
            "/ui/post",
            {"user": "alice", "text": "@agent refund 80 EUR on order 1042, it arrived broken"},
        )
        wait_until(lambda: approve_button(page.thread()), seconds=30)
        [card] = [reply for reply in page.thread()["replies"] if reply.get("blocks")]
    heading = card["blocks"][0]["text"]["text"]
    assert heading == ":raised_hand: *Approval needed*: `refund`, asked by the `billing` agent"
