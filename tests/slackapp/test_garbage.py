"""Garbage and floods cost nothing, against a real `python -m bot serve` (local backend):
whatever reaches `POST /slack/events` unsigned, forged, stale, or signed but unparsable
(deep, huge, binary, not UTF-8, truncated, of another content type) gets a 4xx and at most
one log line, never a traceback; and anonymous install pages write nothing durable."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import aiohttp
import boto3
import pytest

from bot.slackapp.gate import BODY_LIMIT
from bot.standin import requests
from bot.standin.slack_api import SlackWebApi
from testkit.health import wait_healthy
from testkit.prefork import popen
from testkit.services import free_port
from testkit.slack import CLIENT_ID, CLIENT_SECRET, SECRET, TEAM, running_api
from tests.conftest import Backend

pytestmark = pytest.mark.slow
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ ")  # the bot's log format


@asynccontextmanager
async def serving(env: dict[str, str], log: Path) -> AsyncIterator[str]:
    """A `python -m bot serve` child, healthy; its URL. Stopped (SIGTERM) after."""
    child = start_bot(env, log)
    url = f"http://127.0.0.1:{env['PORT']}"
    try:
        await wait_healthy(url, child, log)
        yield url
        assert child.poll() is None, "the bot died"
    finally:
        child.terminate()
        await asyncio.to_thread(child.wait, 30)


def start_bot(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return popen([sys.executable, "-m", "bot", "serve"], env=env, stdout=out, stderr=out)


def bot_env(base: dict[str, str], api_url: str, **extra: str) -> dict[str, str]:
    """`base` (the storage's settings among them) and Slack's, in front of `api_url`."""
    env = {
        **base,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": f"{api_url}/api/",
        "PORT": str(free_port()),
        "HOST": "127.0.0.1",
        "BOT_DEMO_MODEL": "1",
        "BOT_DEMO_DELAY": "0",
        "PYTHONPATH": str(Path.cwd()),
        **extra,
    }
    for name in ("SLACK_APP_TOKEN", *(() if "SLACK_BOT_TOKEN" in extra else ("SLACK_BOT_TOKEN",))):
        env.pop(name, None)
    return env


# -- garbage at /slack/events -------------------------------------------------------------------


def signature(raw: bytes, *, secret: str = SECRET, age: int = 0) -> dict[str, str]:
    """Slack's headers over raw bytes (which need not be UTF-8)."""
    stamp = str(int(time.time()) - age)
    digest = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + raw, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


Signing = Callable[[bytes], dict[str, str]]
SIGNINGS: dict[str, Signing] = {
    "signed": signature,
    "unsigned": lambda raw: {},
    "forged": lambda raw: signature(raw, secret="not-the-secret"),
    "stale": lambda raw: signature(raw, age=6 * 60),  # beyond bolt's 5 minutes
    "from the future": lambda raw: signature(raw, age=-6 * 60),
    "zero signature": lambda raw: {
        "X-Slack-Request-Timestamp": str(int(time.time())),
        "X-Slack-Signature": "v0=" + "0" * 64,
    },
    "odd timestamp": lambda raw: signature(raw) | {"X-Slack-Request-Timestamp": "1e9"},
    "no timestamp": lambda raw: {"X-Slack-Signature": signature(raw)["X-Slack-Signature"]},
}
JSON, FORM = "application/json", requests.FORM


def garbage(rng: random.Random) -> dict[str, tuple[bytes, str]]:
    """One of each kind of body Slack never sends: (raw body, content type)."""
    depth = rng.randrange(2_000, 20_000)
    event = requests.event_callback(
        TEAM, requests.app_mention(user="U1", text="hi", ts="1.2", channel="C1")
    )
    cut = rng.randrange(1, len(event) - 1)
    return {
        "deep array": (b"[" * depth + b"]" * depth, JSON),
        "deep object": (b'{"a":' * depth + b"1" + b"}" * depth, JSON),
        "deep event": (
            event[:-1].encode() + b',"x":' + b"[" * depth + b"]" * depth + b"}",
            JSON,
        ),
        "huge": (b'{"a":"' + b"x" * (BODY_LIMIT + rng.randrange(1, 10_000)) + b'"}', JSON),
        "binary": (rng.randbytes(rng.randrange(1, 2_000)), rng.choice([JSON, FORM])),
        "bad UTF-8": (event.encode()[:cut] + b"\xff\xfe\xc3" + event.encode()[cut:], JSON),
        "lone surrogate": (
            json.dumps({"a": "\ud83d"}, ensure_ascii=False).encode("utf-8", "surrogatepass"),
            JSON,
        ),
        "truncated JSON": (event.encode()[:cut], JSON),
        "a JSON array": (b"[" + event.encode() + b"]", JSON),
        "payload garbage": (b"payload=" + rng.randbytes(40).hex().encode(), FORM),
        "payload deep": (b"payload=" + b"%5B" * depth, FORM),
        "payload not an object": (urlencode({"payload": "[1, 2]"}).encode(), FORM),
        "a form of another shape": (urlencode({"a": rng.randbytes(9).hex()}).encode(), FORM),
        "an object of another shape": (json.dumps({"type": rng.randbytes(4).hex()}).encode(), JSON),
        "an event of another type": (
            requests.event_callback(TEAM, {"type": rng.randbytes(4).hex()}).encode(),
            JSON,
        ),
        "an action of another kind": (
            urlencode({"payload": json.dumps({"type": "block_actions", "actions": []})}).encode(),
            FORM,
        ),
        "text/plain": (event.encode(), "text/plain"),
        "multipart": (b"--x\r\n\r\nhi\r\n--x--", "multipart/form-data; boundary=x"),
        "odd charset": (event.encode("utf-16"), "application/json; charset=utf-16"),
        "no content type": (event.encode(), ""),
    }


async def post(
    http: aiohttp.ClientSession,
    url: str,
    raw: bytes | AsyncIterator[bytes],
    content_type: str,
    headers: dict[str, str],
) -> int:
    sent = {**headers, **({"Content-Type": content_type} if content_type else {})}
    async with http.post(
        f"{url}/slack/events", data=raw, headers=sent, skip_auto_headers=["Content-Type"]
    ) as response:
        await response.read()
        return response.status


async def healthz(http: aiohttp.ClientSession, url: str) -> int:
    async with http.get(f"{url}/healthz") as response:
        return response.status


async def chunked(raw: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(raw), 256 * 1024):
        yield raw[start : start + 256 * 1024]


def valid_requests() -> list[tuple[bytes, str]]:
    """Signed requests Slack does send (answered 200, by bolt itself)."""
    challenge = json.dumps({"type": "url_verification", "challenge": "c", "token": "t"})
    return [(challenge.encode(), JSON), (b"ssl_check=1&token=t", FORM)]


async def test_garbage_gets_a_4xx_and_at_most_one_log_line(tmp_path: Path) -> None:
    rng = random.Random(20261130)
    local = {**os.environ, "BOT_STORAGE": "local", "BOT_DATA_DIR": str(tmp_path / "data")}
    async with (
        running_api(SlackWebApi(team=TEAM)) as api_url,
        serving(bot_env(local, api_url, SLACK_BOT_TOKEN="xoxb-test"), tmp_path / "log") as url,
        aiohttp.ClientSession() as http,
    ):
        log = tmp_path / "log"
        logged_before = len(log.read_text().splitlines())
        statuses: dict[str, set[int]] = {}
        bad = 0
        started = time.monotonic()
        for turn in range(2):
            bodies = garbage(rng)
            for (kind, (raw, content_type)), name in itertools.product(bodies.items(), SIGNINGS):
                status = await post(http, url, raw, content_type, SIGNINGS[name](raw))
                statuses.setdefault(f"{kind}, {name}", set()).add(status)
            # The same bodies again, in parallel, each in a random signing; healthy meanwhile.
            cases = [(raw, ct, rng.choice(list(SIGNINGS))) for raw, ct in bodies.values()] * 8
            health, *answers = await asyncio.gather(
                healthz(http, url),
                *(post(http, url, raw, ct, SIGNINGS[name](raw)) for raw, ct, name in cases),
            )
            assert health == 200
            statuses.setdefault(f"in parallel, turn {turn}", set()).update(answers)
            huge = bodies["huge"][0]  # sent without a Content-Length, in chunks
            status = await post(http, url, chunked(huge), JSON, signature(huge))
            statuses.setdefault("huge, chunked, signed", set()).add(status)
            bad += len(bodies) * len(SIGNINGS) + len(cases) + 1
            for raw, content_type in valid_requests():
                assert await post(http, url, raw, content_type, signature(raw)) == 200
        elapsed = time.monotonic() - started
        assert await healthz(http, url) == 200
        await asyncio.sleep(0.2)  # the last lines reach the file
        lines = log.read_text(errors="replace").splitlines()[logged_before:]

    not_4xx = {case: a for case, a in statuses.items() if any(not 400 <= s < 500 for s in a)}
    assert not_4xx == {}
    assert "Traceback" not in log.read_text(errors="replace")
    assert len(lines) <= bad, f"{len(lines)} log lines for {bad} bad requests"
    assert all(LOG_LINE.match(line) for line in lines), [
        line[:120] for line in lines if not LOG_LINE.match(line)
    ][:5]
    assert all(len(line) < 400 for line in lines), max(lines, key=len)[:400]
    assert bad > 300 and elapsed < 30, (bad, elapsed)


# -- anonymous install pages ---------------------------------------------------------------------


async def install_page(http: aiohttp.ClientSession, url: str) -> tuple[str, str]:
    """What an anonymous GET of the install page gets: (the state, also set as bolt's
    cookie; the link to Slack's authorize page, carrying it)."""
    async with http.get(f"{url}/slack/install", params={"team": TEAM}) as page:
        assert page.status == 200, await page.text()
        cookie = page.headers["Set-Cookie"].split(";", 1)[0]
        found = re.search(r'<a href="([^"]+)"', await page.text())
    assert found is not None
    link = found.group(1).replace("&amp;", "&")
    [state] = parse_qs(urlsplit(link).query)["state"]
    assert cookie == f"slack-app-oauth-state={state}"
    return state, link


def kept(backend: Backend) -> tuple[int, int]:
    """(bytes, rows) the backend holds: the local data directory's size and its one-time
    states; DynamoDB's items (the table is this test's alone). The sqlite write-ahead log is
    copied into the database first and left out: it grows with any write (the replica's
    heartbeat every few seconds, longer on a loaded machine), and shrinks again."""
    if backend.name == "local":
        data = Path(backend.env["BOT_DATA_DIR"])
        with sqlite3.connect(data / "state.sqlite3") as db:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)")
            rows = db.execute("SELECT COUNT(*) FROM one_time_states").fetchone()[0]
        size = sum(
            f.stat().st_size
            for f in data.rglob("*")
            if f.is_file() and not f.name.endswith(("-wal", "-shm"))
        )
        return size, rows
    items = boto3.client("dynamodb").scan(TableName=backend.env["BOT_TABLE"], Select="COUNT")
    return 0, int(items["Count"])


async def test_install_pages_write_nothing_and_a_state_is_good_once(
    backend: Backend, child_env: Callable[..., dict[str, str]], tmp_path: Path
) -> None:
    api = SlackWebApi(team=TEAM)
    async with running_api(api) as api_url:
        env = bot_env(child_env(), api_url, SLACK_CLIENT_ID=CLIENT_ID)
        env["SLACK_CLIENT_SECRET"] = CLIENT_SECRET
        url = f"http://127.0.0.1:{env['PORT']}"
        api.configure_oauth(CLIENT_ID, CLIENT_SECRET, f"{url}/slack/oauth_redirect")
        async with serving(env, tmp_path / "log"), aiohttp.ClientSession() as http:
            before = kept(backend)
            gate = asyncio.Semaphore(16)

            async def anonymous() -> str:
                async with gate:
                    state, _ = await install_page(http, url)
                    return state

            states = await asyncio.gather(*(anonymous() for _ in range(2000)))
            flooded = kept(backend)
            assert await healthz(http, url) == 200

            # A real install: Slack's authorize page sends the browser back with a code.
            state, link = await install_page(http, url)
            async with http.get(link, allow_redirects=False) as approved:
                assert approved.status == 302, await approved.text()
                back = approved.headers["Location"]
            # A tampered state (with its own cookie, so bolt's browser check passes) is
            # refused before the code is used.
            forged = f"{state[:-2]}{'AB' if not state.endswith('AB') else 'CD'}"
            assert await redirect(http, back.replace(state, forged), forged) == 401
            assert await redirect(http, back, state) == 200
            installed = kept(backend)
            assert await redirect(http, back, state) == 401  # the same redirect, replayed
            assert await healthz(http, url) == 200

    assert len(set(states)) == 2000  # each page had a state of its own
    assert flooded[1] == before[1], (before, flooded)  # no row for 2,000 pages
    assert flooded[0] - before[0] < 16 * 1024, (before, flooded)
    # The redirect wrote: the installation, and the spent state (local: its row).
    assert installed[1] == before[1] + (1 if backend.name == "local" else 2)
    reopened = backend.open()
    assert reopened.find_installation(f"-:{TEAM}") is not None


async def redirect(http: aiohttp.ClientSession, back: str, state: str) -> int:
    """The browser's return to the bot's redirect, with the state's cookie."""
    async with http.get(back, headers={"Cookie": f"slack-app-oauth-state={state}"}) as done:
        await done.read()
        return done.status
