"""Conversations that last, through the real bot (`python -m bot serve`, signed requests,
the Web API stand-in) on both backends, against a scripted /v1/responses server that
behaves like the real API with a window of 60,000 characters: it refuses a larger request
with OpenAI's `context_length_exceeded` body (and any tool output without its call).

A thread of 30 messages of 4,000 characters is answered every time, and so is a tool that
returns 400,000 characters, and the message after it; every request stays within the
window; earlier turns are summed up, each summary folding the one before, stored once.
Killed while the model writes a summary, the bot loses nothing after its restart, stores
one summary and answers the thread; killed right after the commit that stores it, the
summary is read after the restart, not made again, and the answer it held is posted once."""

from __future__ import annotations

import asyncio
import re
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from storage import ConversationKey, Store
from storage.local import LocalStore
from testkit.deployment import Deployment, deployment
from testkit.long_thread_agent import LOG_CHARACTERS, LOG_HEAD, LOG_TAIL
from testkit.responses import (
    RespondingResponses,
    items_of,
    message,
    request_size,
    tool_call,
    user_text,
)
from testkit.runtime import history, record_of
from testkit.slack import CHANNEL, thread_key
from tests.conftest import Backend

pytestmark = pytest.mark.slow

WINDOW = 60_000  # characters of input and instructions the scripted model takes
SETTINGS = {
    "BOT_AGENT": "testkit.long_thread_agent:build_agent",
    "BOT_CONTEXT_TOKENS": "28000",  # what the bot is told: ~56 KB of input, estimated
    "BOT_LEASE_SECONDS": "2",
    "BOT_LEASE_SKEW_SECONDS": "0",
}
# How a summary's request begins (bot/runtime/summaries.py's instructions).
SUMMARY_MARK = "You write the running summary of a Slack thread"
NUMBERED = re.compile(r"message (\d+):")


def said(number: int) -> str:
    return f"message {number}: " + " ".join(f"word{n % 97}" for n in range(600))[:3_985]


class Model:
    """The scripted model: answers each message by its number, reads the log when asked,
    writes summaries (numbered, each naming the one it folds in); `hold` keeps the first
    summary request waiting until it is set."""

    def __init__(self, hold: threading.Event | None = None) -> None:
        self.hold = hold
        self.summarizing = threading.Event()
        self.summary_requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def respond(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        if (request.get("instructions") or "").startswith(SUMMARY_MARK):
            with self.lock:
                self.summary_requests.append(request)
                number = len(self.summary_requests)
            self.summarizing.set()
            if self.hold is not None and number == 1:
                self.hold.wait(60)  # the bot is killed meanwhile: this answer goes nowhere
            return [message(f"Summary {number}: people sent numbered messages.")]
        last = items_of(request)[-1]
        if last.get("type") == "function_call_output":
            seen = str(last.get("output"))
            whole = seen.startswith(LOG_HEAD) and seen.endswith(LOG_TAIL)
            cut = "characters of this tool's output left out]" in seen
            text = f"The log runs from {LOG_HEAD} to {LOG_TAIL}." if whole and cut else "?"
            return [message(text)]
        asked = user_text(request)
        if "read the log" in asked:
            return [tool_call("read_log", {}, "call_log")]
        found = NUMBERED.search(asked)
        return [message(f"Answer to message {found.group(1) if found else '?'}. " + "ok " * 150)]


async def answered(bot: Deployment, top: str, count: int) -> list[str]:
    replies = await bot.api.wait_for(
        lambda: len(r := bot.api.bot_replies(CHANNEL, top)) >= count and r, within=60
    )
    return [reply.text for reply in replies]


def summary_rows(store: Store, key: ConversationKey) -> int:
    if isinstance(store, LocalStore):
        row = (
            store.database.connection()
            .execute("SELECT COUNT(*) FROM summaries WHERE key = ?", (str(key),))
            .fetchone()
        )
        return int(row[0])
    tables = store.tables  # type: ignore[attr-defined]
    found = tables.dynamodb.query(
        TableName=tables.table,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :summary)",
        ExpressionAttributeValues={":pk": {"S": f"CONV#{key}"}, ":summary": {"S": "SUMMARY#"}},
    )
    return int(found["Count"])


async def test_a_long_thread_and_a_huge_tool_output_are_answered_within_the_window(
    backend: Backend, tmp_path: Path
) -> None:
    model = Model()
    script = RespondingResponses(model.respond, window=WINDOW)
    async with deployment(backend, tmp_path, script, **SETTINGS) as bot:
        await bot.start()
        people = bot.people()
        top = (await bot.mention("UALICE", said(1))).ts
        await answered(bot, top, 1)
        for number in range(2, 31):
            await people.reply("UALICE", said(number), top)
            await answered(bot, top, number)
        await people.reply("UALICE", "please read the log", top)
        await answered(bot, top, 31)
        await people.reply("UALICE", said(32), top)
        replies = await answered(bot, top, 32)
        # Every message answered, in order; the log's answer read its head and its tail.
        expected = [f"Answer to message {n}." for n in range(1, 31)]
        assert [text.split(" ok")[0] for text in replies[:30]] == expected
        assert replies[30] == f"The log runs from {LOG_HEAD} to {LOG_TAIL}."
        assert replies[31].startswith("Answer to message 32.")
        assert len(replies) == 32
        # Every request fitted: none refused, each within the window.
        assert script.refused == []
        assert max(request_size(r) for r in script.requests) <= WINDOW
        key = thread_key(top)
        record = record_of(bot.store, key)
        stored = bot.store.read_summary(record)
        kept = history(bot.store, key)
        rows = summary_rows(bot.store, key)

    # Earlier turns were summed up, each summary folding the previous one, stored once.
    summaries = model.summary_requests
    assert len(summaries) >= 3
    for number, request in enumerate(summaries[1:], start=1):
        assert f"Summary {number}: people sent numbered messages." in str(request["input"])
    assert stored is not None and stored.text.startswith(f"Summary {len(summaries)}:")
    assert rows == 1 and record.summary_seq == stored.through
    assert str(script.requests[-1]["input"][0]).count(stored.text) == 1  # given, first
    # The stored history is exact: every message, the whole log, no note or summary.
    users = [NUMBERED.search(str(i["content"])) for i in kept if i.get("role") == "user"]
    assert [int(m.group(1)) for m in users if m] == [*range(1, 31), 32]
    [log] = [i["output"] for i in kept if i.get("type") == "function_call_output"]
    assert len(log) == LOG_CHARACTERS
    assert all(i.get("role") != "developer" for i in kept)


async def test_killed_while_summarizing_nothing_is_lost_and_one_summary_is_stored(
    backend: Backend, tmp_path: Path
) -> None:
    hold = threading.Event()
    model = Model(hold)
    script = RespondingResponses(model.respond, window=WINDOW)
    settings = {**SETTINGS, "BOT_HISTORY_ITEMS": "8"}  # a summary after a few messages
    async with deployment(backend, tmp_path, script, **settings) as bot:
        await bot.start()
        people = bot.people()
        top = (await bot.mention("UALICE", said(1))).ts
        number = 1
        while not model.summarizing.is_set() and number < 12:
            await answered(bot, top, number)
            number += 1
            await people.reply("UALICE", said(number), top)
        assert await asyncio.to_thread(model.summarizing.wait, 30), "no summary was asked for"
        killed = await bot.signal(signal.SIGKILL)
        hold.set()
        assert killed == -signal.SIGKILL
        await bot.start()
        replies = await bot.api.wait_for(
            lambda: (
                any(
                    f"Answer to message {number}." in r.text
                    for r in bot.api.bot_replies(CHANNEL, top)
                )
                and bot.api.bot_replies(CHANNEL, top)
            ),
            within=60,
        )
        assert number >= 4
        answers = [r.text.split(" ok")[0] for r in replies if r.text.startswith("Answer to")]
        assert answers == [f"Answer to message {n}." for n in range(1, number + 1)]
        key = thread_key(top)
        record = record_of(bot.store, key)
        stored = bot.store.read_summary(record)
        kept = history(bot.store, key)
        rows = summary_rows(bot.store, key)

    # Asked twice (the first answer never arrived), stored once: the second.
    assert len(model.summary_requests) == 2
    assert rows == 1 and stored is not None and stored.text.startswith("Summary 2:")
    assert record.summary_seq == stored.through
    # Nothing lost: every message in the history once, in order.
    users = [NUMBERED.search(str(i["content"])) for i in kept if i.get("role") == "user"]
    assert [int(m.group(1)) for m in users if m] == list(range(1, number + 1))
    assert script.refused == []


async def answered_or_died(bot: Deployment, top: str, count: int) -> bool:
    """True once `count` replies are in the thread, False if the bot died first (the
    stand-in's `wait_for` wakes only on a call to it, which a dead bot never makes)."""
    for _ in range(600):
        if bot.current.poll() is not None:
            return False
        if len(bot.api.bot_replies(CHANNEL, top)) >= count:
            return True
        await asyncio.sleep(0.1)
    raise AssertionError(f"no reply {count} within 60 s, and the bot still runs")


async def test_killed_right_after_the_summary_is_stored_it_is_used_not_made_again(
    backend: Backend, tmp_path: Path
) -> None:
    """The other step of summarizing: the bot dies (SIGKILL, from inside, `DIE_AFTER_SUMMARY`)
    right after the commit that stores the summary lands, before the answer it holds is
    posted. After the restart the summary is read, not asked for again, the answer is
    posted once, and every message is in the history once."""
    model = Model()
    script = RespondingResponses(model.respond, window=WINDOW)
    settings = {**SETTINGS, "BOT_HISTORY_ITEMS": "8"}
    async with deployment(backend, tmp_path, script, **settings) as bot:
        bot.env["DIE_AFTER_SUMMARY"] = "1"
        await bot.start()
        people = bot.people()
        top = (await bot.mention("UALICE", said(1))).ts
        number = 1
        while number < 12 and await answered_or_died(bot, top, number):
            number += 1
            await people.reply("UALICE", said(number), top)
        assert await asyncio.to_thread(bot.current.wait, 60) == -signal.SIGKILL
        assert len(model.summary_requests) == 1
        del bot.env["DIE_AFTER_SUMMARY"]
        await bot.start()
        replies = await bot.api.wait_for(
            lambda: (
                any(
                    f"Answer to message {number}." in r.text
                    for r in bot.api.bot_replies(CHANNEL, top)
                )
                and bot.api.bot_replies(CHANNEL, top)
            ),
            within=60,
        )
        answers = [r.text.split(" ok")[0] for r in replies if r.text.startswith("Answer to")]
        key = thread_key(top)
        record = record_of(bot.store, key)
        stored = bot.store.read_summary(record)
        kept = history(bot.store, key)
        rows = summary_rows(bot.store, key)

    assert answers == [f"Answer to message {n}." for n in range(1, number + 1)]
    assert len(model.summary_requests) == 1  # stored before the kill: read, not made again
    assert rows == 1 and stored is not None and stored.text.startswith("Summary 1:")
    users = [NUMBERED.search(str(i["content"])) for i in kept if i.get("role") == "user"]
    assert [int(m.group(1)) for m in users if m] == list(range(1, number + 1))
    assert script.refused == []
