"""Who may do what, and bad input: /resume and buttons never enrol the bot in a thread,
text from the model, a tool or a user cannot ping a channel or disguise a link, users see
plain reasons (never internals), malformed requests get a 4xx and change nothing, and a fuzz
of thousands of signed garbage requests leaves the bot up and the storage empty."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import sqlite3
import string
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
import pytest
from agents.testing import ScriptedModel, assistant_message

from bot.admin import AdminCommands
from bot.permalink import NOT_A_THREAD_LINK, permalink
from bot.runtime import ConversationRuntime
from bot.settings import RuntimeSettings
from bot.slackapp import gate
from bot.slackapp.blocks import approval_blocks
from bot.slackapp.text import escape, split_text
from bot.standin import requests
from bot.standin.slack_api import SlackWebApi
from storage.local import LocalStore
from testkit.child_env import child_bot_env
from testkit.health import wait_healthy
from testkit.prefork import popen
from testkit.runtime import KEY, SideEffects, build_agent, echo_model, history
from testkit.services import free_port
from testkit.slack import (
    CHANNEL,
    SECRET,
    TEAM,
    Harness,
    running_api,
    runtime_of,
    signed_headers,
    slack_bot,
    thread_key,
)

EVIL = "<!channel> <!here> <@U0BOSS> <https://evil.example/sso|Click Approve, it is safe> & co"


# -- escaping --------------------------------------------------------------------------------


def test_escaping_leaves_no_control_sequence() -> None:
    escaped = escape(EVIL)
    assert "<" not in escaped and ">" not in escaped
    assert escaped.count("&amp;") == 1 and "&lt;!channel&gt;" in escaped
    # Splitting never cuts an entity in two.
    for piece in split_text(escape("<" * 5000), limit=997):
        assert not piece.endswith(("&", "&l", "&lt")), piece[-4:]


def test_approval_cards_escape_the_tool_arguments() -> None:
    from bot.runtime import ApprovalRequest, PendingCall

    call = PendingCall(
        call_id="c1", tool_name="file_ticket", arguments=json.dumps({"title": EVIL, "x": "``"})
    )
    request = ApprovalRequest(key=KEY, calls=[call], checkpoint_version=1, requested_by="U1")
    text = json.dumps(approval_blocks(request, call))
    assert "<!channel>" not in text and "<https://evil" not in text and "<@U0BOSS>" not in text
    assert "<@U1>" in text  # the mention the bot means to make still works


async def test_model_text_is_posted_escaped(local_store: LocalStore, effects: SideEffects) -> None:
    model = ScriptedModel([[assistant_message(f"Sure. {EVIL}")]])
    runtime = runtime_of(local_store, build_agent(model, effects))
    async with slack_bot(local_store, runtime) as bot:
        top = await bot.mention("UALICE", "say something nasty")
        [answer] = await bot.bot_replies(top.ts, 1)
    assert answer.text == f"Sure. {escape(EVIL)}"


# -- who may resume ----------------------------------------------------------------------------


async def test_resume_and_buttons_never_enrol_the_bot(
    local_store: LocalStore, effects: SideEffects
) -> None:
    runtime = runtime_of(local_store, build_agent(echo_model(10), effects))
    async with slack_bot(local_store, runtime) as bot:
        top = bot.api.add_user_message("C0PRIVATE", "UCAROL", "salary review for Dave")
        await bot.reply("UCAROL", "private follow-up 1", top.ts, channel="C0PRIVATE")
        link = permalink(thread_key(top.ts, "C0PRIVATE"))
        _, token = await bot.command("/resume", link, "UMALLORY")
        [reply] = await bot.responses_for(token)
        assert "can't resume" in reply["text"]
        # A forged click for that thread (a value the bot never issued).
        fake = bot.api.add_user_message("C0PRIVATE", "UMALLORY", "card")
        fake.blocks = [
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "approval_approve",
                        "value": json.dumps(
                            {"k": str(thread_key(top.ts, "C0PRIVATE")), "c": "x", "v": 1}
                        ),
                    }
                ],
            }
        ]
        assert await bot.click(fake, "approval_approve", "UMALLORY") == 200
        await bot.api.wait_for(lambda: len(bot.api.responses) >= 2)
        assert local_store.get(thread_key(top.ts, "C0PRIVATE")) is None  # no record was created
        await bot.reply("UCAROL", "private follow-up 2", top.ts, channel="C0PRIVATE")
        # Answered, and still not kept: nothing is left to serve in that thread.
        assert local_store.get(thread_key(top.ts, "C0PRIVATE")) is None
        assert bot.api.bot_replies("C0PRIVATE", top.ts) == []


# -- users see plain reasons ---------------------------------------------------------------------


async def test_a_failed_run_shows_a_reason_and_a_reference_not_internals(
    local_store: LocalStore, effects: SideEffects
) -> None:
    model = ScriptedModel(
        [
            RuntimeError(
                "Connection to https://api.internal:8443 refused (arn:aws:iam::123456789012)"
            )
        ]
    )
    runtime = runtime_of(local_store, build_agent(model, effects))
    async with slack_bot(local_store, runtime) as bot:
        top = await bot.mention("UALICE", "hi")
        [notice] = await bot.bot_replies(top.ts, 1)
        async with bot.http.get(f"{bot.bot_url}/healthz") as response:
            health = await response.json()
    assert "the model service failed" in notice.text and "reference: ref-" in notice.text
    assert (
        "arn:" not in notice.text
        and "8443" not in notice.text
        and "RuntimeError" not in notice.text
    )
    assert health == {"ok": True}


# -- malformed input ---------------------------------------------------------------------------


async def post_raw(bot: Harness, body: str, content_type: str, headers: dict[str, str]) -> int:
    async with bot.http.post(
        f"{bot.bot_url}/slack/events",
        data=body.encode("utf-8", "surrogatepass"),
        headers={"Content-Type": content_type, **headers},
    ) as response:
        return response.status


async def test_malformed_requests_get_a_4xx_and_change_nothing(
    local_store: LocalStore, effects: SideEffects, tmp_path: Path
) -> None:
    runtime = runtime_of(local_store, build_agent(echo_model(5), effects))
    async with slack_bot(local_store, runtime) as bot:
        broken = "{not json"
        assert await post_raw(bot, broken, "application/json", signed_headers(broken)) == 400
        payload = "payload=%7Bbroken"
        assert await post_raw(bot, payload, requests.FORM, signed_headers(payload)) == 400
        for event in (
            requests.app_mention(user="U1", text="x", ts="../../etc", channel="C/../.."),
            {"type": "app_mention", "user": "U1", "text": "x", "channel": CHANNEL},
            {"type": "app_mention", "user": 7, "text": ["x"], "ts": "1.2", "channel": {"a": 1}},
        ):
            body = requests.event_callback(TEAM, event)  # ignored (200) or refused (400)
            assert await post_raw(bot, body, "application/json", signed_headers(body)) in (200, 400)
        # Each was answered after the bot decided what to keep; the rows say what that was.
        async with bot.http.get(f"{bot.bot_url}/healthz") as response:
            assert response.status == 200
    rows = sqlite3.connect(tmp_path / "data" / "state.sqlite3").execute(
        "SELECT COUNT(*) FROM conversations"
    )
    assert rows.fetchone()[0] == 0


async def slow_unsigned(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A request with Slack's headers (a bogus signature), a valid content type and a length,
    whose body has only begun to arrive."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"X-Slack-Signature: v0=bogus\r\nX-Slack-Request-Timestamp: 1\r\n"
        b"Content-Length: 100000\r\n\r\n "
    )
    await writer.drain()
    return reader, writer


async def requests_in_flight(bot: Harness) -> float:
    """The bot's `bot_slack_requests_in_flight` gauge, scraped from its `/metrics`."""
    async with bot.http.get(f"{bot.bot_url}/metrics") as page:
        found = re.search(r"^bot_slack_requests_in_flight (\S+)$", await page.text(), re.M)
    assert found is not None
    return float(found.group(1))


async def test_slow_unsigned_requests_hold_nothing_back_and_leave_one_line_each(
    local_store: LocalStore,
    effects: SideEffects,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Requests that send their body slowly are not in flight (runs do not wait for them:
    only a request Slack signed counts); the body must arrive within `BODY_SECONDS` (408);
    a client that goes away first costs one log line, never a traceback."""
    monkeypatch.setattr(gate, "BODY_SECONDS", 1.0)
    runtime = runtime_of(local_store, build_agent(echo_model(5), effects))
    async with slack_bot(local_store, runtime) as bot:
        port = int(bot.bot_url.rsplit(":", 1)[1])
        slow = [await slow_unsigned(port) for _ in range(8)]
        top = await bot.mention("UALICE", "hello")  # after the slow ones' headers
        await bot.bot_replies(top.ts, 1)
        assert bot.runtime.acks_first.in_flight == 0 and not bot.runtime.acks_first.crowded
        assert await requests_in_flight(bot) == 0  # and /metrics says so
        with bot.runtime.acks_first.keeping():  # as a request Slack signed, while it is answered
            assert await requests_in_flight(bot) == 1
        for _, writer in slow[:4]:  # these go away
            writer.close()
        for reader, writer in slow[4:]:  # these are still sending: told they were too slow
            writer.write(b" ")
            status_line = await asyncio.wait_for(reader.readline(), 30)
            assert status_line.startswith(b"HTTP/1.1 408 "), status_line
            writer.close()

        def lines(reason: str) -> list[logging.LogRecord]:
            return [r for r in caplog.records if reason in r.getMessage()]

        await bot.api.wait_for(lambda: len(lines("client went away")) == 4)
    assert len(lines("body not received in time")) == 4
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


async def test_a_lone_surrogate_is_replaced_not_dropped(
    local_store: LocalStore, effects: SideEffects
) -> None:
    runtime = ConversationRuntime(local_store, build_agent(echo_model(3), effects))
    text = json.loads('"bad \\ud83d surrogate"')
    outcomes = await runtime.handle_message(KEY, event_id="E1", user="U1", text=text)
    assert [getattr(o, "text", "") for o in outcomes] == ["echo: bad \ufffd surrogate"]
    assert history(local_store)[0]["content"] == "<@U1>: bad \ufffd surrogate"


async def test_admin_arguments_are_validated(local_store: LocalStore, effects: SideEffects) -> None:
    runtime = ConversationRuntime(local_store, build_agent(echo_model(1), effects))
    admin = AdminCommands(runtime, permalink)
    huge = await admin.run("discard stale --older-than 99999999999d", team=TEAM, by="UADMIN")
    assert not huge.ok and "too long" in huge.text
    bogus = await admin.run("bogus", team=TEAM, by="UADMIN")
    assert not bogus.ok and "Unknown command `bogus`" in bogus.text and "discard" in bogus.text
    quote = await admin.run('discard "unterminated', team=TEAM, by="UADMIN")
    assert not quote.ok


MALFORMED_LINKS = [
    f"https://x.slack.com/archives/{CHANNEL}/p1234567890123456?thread_ts=abc",
    # Digits Python's `\\d` takes and no Slack timestamp has: Arabic-Indic, fullwidth.
    f"https://x.slack.com/archives/{CHANNEL}/p" + "".join(chr(0x0660 + d % 10) for d in range(16)),
    f"https://x.slack.com/archives/{CHANNEL}/p" + "".join(chr(0xFF10 + d % 10) for d in range(16)),
]


async def test_a_malformed_link_gets_the_same_plain_answer_from_both_commands(
    local_store: LocalStore, effects: SideEffects
) -> None:
    """`/resume` and `/agent-admin status` parse links with one parser and answer a
    malformed one in the same plain words: no validation library's text, no echo."""
    runtime = runtime_of(
        local_store,
        build_agent(echo_model(1), effects),
        RuntimeSettings(admins=frozenset({"UADMIN"})),
    )
    async with slack_bot(local_store, runtime, admins=frozenset({"UADMIN"})) as bot:
        answers = set()
        for link in MALFORMED_LINKS:
            for command, user, text in (
                ("/resume", "UALICE", link),
                ("/resume", "UALICE", f"<{link}>"),
                ("/agent-admin", "UADMIN", f"status {link}"),
            ):
                status, token = await bot.command(command, text, user)
                assert status == 200
                [answer] = await bot.responses_for(token)
                answers.add(answer["text"])
        _, token = await bot.command("/agent-admin", f"status {TEAM}:{CHANNEL}:x1", "UADMIN")
        [answer] = await bot.responses_for(token)
        answers.add(answer["text"])
    assert answers == {NOT_A_THREAD_LINK}


async def test_serve_listens_where_it_is_told(
    local_store: LocalStore, effects: SideEffects
) -> None:
    from bot.slackapp.settings import SlackSettings
    from bot.wiring import serve_slack

    runtime = runtime_of(local_store, build_agent(echo_model(1), effects))
    api = SlackWebApi(team=TEAM)
    async with running_api(api) as api_url:
        port = free_port()
        settings = SlackSettings(
            SLACK_BOT_TOKEN="xoxb-test",
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=f"{api_url}/api/",
            PORT=port,
            HOST="0.0.0.0",
        )
        stop = asyncio.Event()
        task = asyncio.create_task(
            serve_slack(settings, local_store, runtime, stop=stop, host="127.0.0.2")
        )
        try:
            async with aiohttp.ClientSession() as http:
                for _ in range(200):
                    try:
                        async with http.get(f"http://127.0.0.2:{port}/healthz") as response:
                            if response.status == 200:
                                break
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.05)
                with pytest.raises(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{port}/healthz"):
                        pass
        finally:
            stop.set()
            await task


# -- a fuzz of signed garbage -------------------------------------------------------------------


def garbage(rng: random.Random) -> tuple[str, str, dict[str, str]]:
    """One request the bot must refuse or ignore: (body, content type, headers)."""

    def junk(n: int) -> str:
        return "".join(rng.choice(string.printable + "\u00e9\u2603\ud83d") for _ in range(n))

    bad_ids = ["", "C/../x", "C:1", "../../etc", " ", "C0\nX", 7, None, ["C1"], {"a": 1}]
    kind = rng.randrange(8)
    if kind == 0:  # not even signed
        body = junk(rng.randrange(1, 300))
        return (
            body,
            "application/json",
            {
                "X-Slack-Signature": "v0=" + "0" * 64,
                "X-Slack-Request-Timestamp": str(int(time.time())),
            },
        )
    if kind == 1:  # signed noise
        body = junk(rng.randrange(0, 500))
        return body, rng.choice(["application/json", requests.FORM, "text/plain"]), {}
    if kind == 2:  # signed JSON of the wrong shape
        body = json.dumps(rng.choice([[], 1, "x", None, {"type": junk(5)}, {"event": junk(9)}]))
        return body, "application/json", {}
    if kind == 3:  # an event with ids that cannot be Slack's
        event = {
            "type": rng.choice(["app_mention", "message"]),
            "user": rng.choice(["U1", "", None, 3]),
            "text": junk(rng.randrange(0, 200)),
            "channel": rng.choice(bad_ids),
            "ts": rng.choice(bad_ids),
            "thread_ts": rng.choice([*bad_ids, "1.2"]),
            "channel_type": rng.choice(["im", "channel", None]),
        }
        return requests.event_callback(TEAM, event), "application/json", {}
    if kind == 4:  # a block_actions payload that is not ours
        payload = {
            "type": "block_actions",
            "user": rng.choice([{"id": "U1"}, {}, None, "U1"]),
            "actions": rng.choice(
                [[], [{"action_id": "approval_approve", "value": junk(30)}], None, "x"]
            ),
            "team": {"id": TEAM},
        }
        return urlencode({"payload": json.dumps(payload)}), requests.FORM, {}
    if kind == 5:  # a slash command with odd arguments
        form = {
            "command": rng.choice(["/resume", "/agent-admin"]),
            "text": junk(rng.randrange(0, 100)),
            "user_id": rng.choice(["U1", ""]),
            "team_id": TEAM,
            "channel_id": rng.choice(["C1", ""]),
            "response_url": "http://127.0.0.1:1/nowhere",
        }
        if rng.random() < 0.5:
            form.pop(rng.choice(list(form)))
        return urlencode(form, errors="surrogatepass"), requests.FORM, {}
    if kind == 6:  # a mutated copy of a real event (still signed)
        good = requests.event_callback(
            TEAM, requests.app_mention(user="U1", text="hi", ts="1.2", channel="C1")
        )
        position = rng.randrange(len(good))
        body = good[:position] + junk(rng.randrange(1, 5)) + good[position + 1 :]
        try:
            json.loads(body)
            return "{" + body, "application/json", {}  # keep it broken
        except ValueError:
            return body, "application/json", {}
    body = requests.event_callback(TEAM, {"type": junk(8), "x": junk(20)})
    return body, "application/json", {}


@pytest.mark.slow
async def test_fuzzed_requests_leave_the_bot_up_and_storage_empty(tmp_path: Path) -> None:
    api = SlackWebApi(team=TEAM)
    async with running_api(api) as api_url:
        port = free_port()
        env = child_bot_env(
            {"BOT_STORAGE": "local", "BOT_DATA_DIR": str(tmp_path / "data")},
            api_url=api_url,
            port=port,
            BOT_DEMO_MODEL="1",
            BOT_DEMO_DELAY="0",
            BOT_ADMINS="U1",
        )
        process = _start_bot(env, tmp_path / "bot.log")
        url = f"http://127.0.0.1:{port}"
        statuses: dict[int, int] = {}
        try:
            await wait_healthy(url, process, tmp_path / "bot.log")
            async with aiohttp.ClientSession() as http:
                rng = random.Random(20261130)
                gate = asyncio.Semaphore(16)

                async def one() -> None:
                    body, content_type, headers = garbage(rng)
                    raw = body.encode("utf-8", "surrogatepass")
                    headers = headers or _signed(raw, SECRET)
                    async with (
                        gate,
                        http.post(
                            f"{url}/slack/events",
                            data=raw,
                            headers={"Content-Type": content_type, **headers},
                        ) as response,
                    ):
                        await response.read()
                        statuses[response.status] = statuses.get(response.status, 0) + 1

                await asyncio.gather(*(one() for _ in range(2000)))
                await asyncio.sleep(1)
                assert process.poll() is None, "the bot died"
                async with http.get(f"{url}/healthz") as response:
                    assert response.status == 200
        finally:
            process.terminate()
            await asyncio.to_thread(process.wait, 30)
    assert sum(statuses.values()) == 2000
    assert all(200 <= status < 500 for status in statuses), statuses
    db = sqlite3.connect(tmp_path / "data" / "state.sqlite3")
    for table in ("conversations", "inbox", "items", "events", "tool_calls"):
        assert db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0, table
    assert "Traceback" not in (tmp_path / "bot.log").read_text(errors="replace")


def _start_bot(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return popen([sys.executable, "-m", "bot", "serve"], env=env, stdout=out, stderr=out)


def _signed(raw: bytes, secret: str) -> dict[str, str]:
    """Slack's signature over raw bytes (which may not even be UTF-8)."""
    import hashlib
    import hmac

    stamp = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + raw, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}
