"""A busy thread's backlog over a real process (`python -m bot serve`), on both backends:
while a slow run holds each thread, one is sent a megabyte of long replies and the other a
burst of short ones, as signed events through the real bolt app. Every event is answered
200; afterwards every message was either given to the agent (the scripted model's inputs
show it) or counted in a notice saying it was not taken (past `BOT_BACKLOG_LIMIT`), never
both, never neither."""

from __future__ import annotations

import asyncio
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bot.standin import requests
from bot.standin.slack_api import Message
from storage import Status
from testkit.deployment import Deployment, Replica, deployment
from testkit.responses import ScriptedResponses, message, user_texts
from testkit.services import wait_until
from testkit.slack import CHANNEL, TEAM, Harness, thread_key
from tests.conftest import Backend

pytestmark = pytest.mark.slow
ALICE, BOB = "UALICE", "UBOB"
LONG = 26  # replies of Slack's longest text (40,000 characters): just over 1 MB
# Short replies, and BOT_BACKLOG_LIMIT (the burst goes past it). 2,000 signed events take
# ~12 s on local, ~40 s on aws (DynamoDB Local on two shared cores), so aws sends fewer,
# under a lower cap; tests/storage/test_backlog.py keeps 2,000 on both, below the Slack layer.
SHORT = {"local": 2000, "aws": 800}
LIMIT = {"local": 1000, "aws": 400}  # local: the default
IN_FLIGHT = 16  # events Slack has under way at once
TOKEN = re.compile(r"\b([LS]\d{4})x")
NOT_TAKEN = re.compile(r"I couldn't take (\d+) messages?")


class HeldThenEcho(ScriptedResponses):
    """A request whose newest message says `slowly` is held until `release` (a run that
    holds its thread); every other one is answered at once."""

    def __init__(self) -> None:
        super().__init__([])
        self.release = threading.Event()
        self.held = 0

    def next_output(self, request: dict[str, Any], headers: dict[str, str]) -> list[dict[str, Any]]:
        with self.lock:
            self.requests.append(request)
            self.headers.append(headers)
        texts = user_texts(request)
        if texts and "slowly" in texts[-1]:
            with self.lock:
                self.held += 1
            self.release.wait(120)
        return [message(f"Read {len(texts)} messages.")]


def given_to_the_agent(script: ScriptedResponses) -> set[str]:
    return {t for r in script.requests for text in user_texts(r) for t in TOKEN.findall(text)}


def notices_in(bot: Deployment, ts: str) -> list[Message]:
    """The thread's notices of messages not taken."""
    return [
        post
        for post in bot.api.bot_replies(CHANNEL, ts)
        if ((post.metadata or {}).get("event_payload") or {}).get("notice") == "not_taken"
    ]


def not_taken(bot: Deployment, ts: str) -> tuple[int, set[str]]:
    """How many messages the thread was told were not taken, and those it quoted."""
    count, quoted = 0, set()
    for post in notices_in(bot, ts):
        found = NOT_TAKEN.search(post.text)
        assert found, post.text
        count += int(found.group(1))
        quoted |= set(TOKEN.findall(post.text))
    return count, quoted


async def send_all(people: Harness, ts: str, texts: list[str]) -> None:
    """Replies in the thread, IN_FLIGHT at a time, each answered 200 (`Harness.reply`)."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(text: str) -> Message:
        async with gate:
            return await people.reply(BOB, text, ts)

    await asyncio.gather(*(one(text) for text in texts))


async def test_a_burst_past_the_cap_is_kept_or_told(backend: Backend, tmp_path: Path) -> None:
    script = HeldThenEcho()
    short, limit = SHORT[backend.name], LIMIT[backend.name]
    cap = {} if backend.name == "local" else {"BOT_BACKLOG_LIMIT": str(limit)}
    # A lease long enough that a loaded machine's slow renewal does not hand the held thread
    # to recovery (which would serve the backlog while it is sent, and none is refused).
    async with deployment(backend, tmp_path, script, BOT_LEASE_SECONDS="10", **cap) as bot:
        await bot.start()
        people = bot.people()
        try:
            long_thread = await bot.mention(ALICE, "read these slowly")
            short_thread = await bot.mention(ALICE, "and these slowly")
            await asyncio.to_thread(wait_until, lambda: script.held == 2, 20)
            longs = [f"L{n:04d}x " + "y" * (40_000 - 7) for n in range(LONG)]
            shorts = [f"S{n:04d}x please" for n in range(short)]
            began = time.monotonic()
            await asyncio.gather(
                send_all(people, long_thread.ts, longs), send_all(people, short_thread.ts, shorts)
            )
            sent_in = time.monotonic() - began
            script.release.set()
            keys = [thread_key(long_thread.ts), thread_key(short_thread.ts)]

            def drained() -> bool:
                records = [bot.store.get(key) for key in keys]
                return all(
                    r is not None
                    and r.status is Status.IDLE
                    and r.lease_owner is None
                    and not r.refusals_untold  # every notice posted
                    for r in records
                ) and not any(bot.store.read_inbox(key) for key in keys)

            await asyncio.to_thread(wait_until, drained, 90)
            await asyncio.sleep(0.5)  # a notice posted twice would be posted by now
        finally:
            await people.close()
    print(f"{LONG + short} replies sent in {sent_in:.1f}s on {backend.name}")
    given = given_to_the_agent(script)
    long_refused, _ = not_taken(bot, long_thread.ts)
    assert long_refused == 0 and {f"L{n:04d}" for n in range(LONG)} <= given  # all 1 MB of it
    refused, quoted = not_taken(bot, short_thread.ts)
    sent = {f"S{n:04d}" for n in range(short)}
    taken = given & sent
    assert refused == short - len(taken) and refused >= short - limit, (refused, len(taken))
    assert quoted and quoted <= sent - taken  # the ones it names were never given


async def test_messages_not_taken_are_told_though_their_process_died(
    backend: Backend, tmp_path: Path
) -> None:
    """The refusals are recorded in the write that refused them: SIGKILLed before it could
    tell them (a burst's notice waits a second for the rest of the burst), the process left
    them on the record, and the next process, recovering the thread, tells them once."""
    script = HeldThenEcho()
    sent = [f"S{n:04d}" for n in range(6)]
    async with deployment(
        backend, tmp_path, script, BOT_LEASE_SECONDS="2", BOT_BACKLOG_LIMIT="3"
    ) as bot:
        await bot.start()
        people = bot.people()
        try:
            thread = await bot.mention(ALICE, "read these slowly")
            await asyncio.to_thread(wait_until, lambda: script.held == 1, 20)
            for token in sent:  # past the cap: the last ones are acked and refused
                await people.reply(BOB, f"{token}x please", thread.ts)
            assert await bot.signal(signal.SIGKILL) == -signal.SIGKILL
            assert not_taken(bot, thread.ts) == (0, set())  # it died before telling
            script.release.set()
            await bot.start()
            key = thread_key(thread.ts)

            def drained() -> bool:
                record = bot.store.get(key)
                return (
                    record is not None
                    and record.status is Status.IDLE
                    and not record.refusals_untold
                    and not bot.store.read_inbox(key)
                )

            await asyncio.to_thread(wait_until, drained, 40)
            await asyncio.sleep(1.0)  # a second notice would be posted by now
        finally:
            await people.close()
    given = given_to_the_agent(script) & set(sent)
    refused, quoted = not_taken(bot, thread.ts)
    assert refused >= 3 and refused == len(sent) - len(given), (refused, given)
    assert quoted == set(sent) - given  # named once, each of them, and never given
    assert len(notices_in(bot, thread.ts)) == 1


async def refused_by_another_replica(
    bot: Deployment, tmp_path: Path, script: HeldThenEcho
) -> tuple[Replica, Message]:
    """A thread held by the first process (its run waits), its backlog full; then a reply
    refused by a second replica, whose notice waits in that replica for the rest of a burst
    (`GATHER_SECONDS`)."""
    await bot.start()
    other = await bot.start_replica(tmp_path / "other.log")
    people = bot.people()
    try:
        thread = await bot.mention(ALICE, "read these slowly")
        await asyncio.to_thread(wait_until, lambda: script.held == 1, 20)
        for token in ("S0000", "S0001"):  # the backlog is full (its first message waits)
            await people.reply(BOB, f"{token}x please", thread.ts)
        refused = bot.api.add_user_message(CHANNEL, BOB, "S0002x please", thread.ts)
        event = requests.message(
            user=BOB, text=refused.text, ts=refused.ts, channel=CHANNEL, thread_ts=thread.ts
        )
        assert await other.post(requests.event_callback(TEAM, event)) == 200
    finally:
        await people.close()
    return other, thread


async def told_once(bot: Deployment, thread: Message) -> None:
    """The thread goes idle with its refusal told; afterwards it holds exactly one notice."""
    key = thread_key(thread.ts)

    def told() -> bool:
        record = bot.store.get(key)
        return record is not None and record.status is Status.IDLE and not record.refusals_untold

    await asyncio.to_thread(wait_until, told, 40)
    await asyncio.sleep(2.5)  # a copy, and the check that deletes it, would be done by now
    notices = notices_in(bot, thread.ts)
    assert len(notices) == 1, [n.text for n in notices]
    assert "S0002" in notices[0].text and "S0000" not in notices[0].text


@pytest.mark.parametrize("backend", ["local"], indirect=True)  # two processes; one backend
async def test_a_frozen_teller_finds_the_notice_a_serve_told_meanwhile(
    backend: Backend, tmp_path: Path
) -> None:
    """Chaos seed 620256: the replica that refused a message was SIGSTOPped before it told
    it; the thread's holder told it once the refusal was `TELL_AFTER` old; woken, the
    frozen replica told it again. Now its teller looks in the thread first."""
    script = HeldThenEcho()
    async with deployment(
        backend, tmp_path, script, BOT_BACKLOG_LIMIT="3", BOT_DUPLICATE_CHECK_SECONDS="1"
    ) as bot:
        other, thread = await refused_by_another_replica(bot, tmp_path, script)
        other.process.send_signal(signal.SIGSTOP)  # within its GATHER_SECONDS
        try:
            assert notices_in(bot, thread.ts) == []
            script.release.set()
            await asyncio.to_thread(wait_until, lambda: notices_in(bot, thread.ts), 30)
            await asyncio.sleep(1.5)  # the holder's own check for copies has run
        finally:
            other.process.send_signal(signal.SIGCONT)
        await told_once(bot, thread)


@pytest.mark.parametrize("backend", ["local"], indirect=True)
async def test_a_tellers_post_landing_after_a_serves_is_deleted_as_its_copy(
    backend: Backend, tmp_path: Path
) -> None:
    """The same race, the other way round (seed 620256's rate-limited retry): the refusing
    replica's post was on its way when the holder, finding nothing in the thread, told the
    refusal; it landed after the holder's check for copies. The teller's own check deletes
    it (the later copy)."""
    script = HeldThenEcho()
    async with deployment(
        backend, tmp_path, script, BOT_BACKLOG_LIMIT="3", BOT_DUPLICATE_CHECK_SECONDS="1"
    ) as bot:
        in_flight = bot.api.hold("chat.postMessage")
        _, thread = await refused_by_another_replica(bot, tmp_path, script)
        held = lambda: bot.api.called("chat.postMessage:held")  # noqa: E731
        await asyncio.to_thread(wait_until, held, 20)
        script.release.set()
        await asyncio.to_thread(wait_until, lambda: notices_in(bot, thread.ts), 30)
        await asyncio.sleep(1.5)  # the holder's check for copies has run
        in_flight.set()
        await asyncio.to_thread(wait_until, lambda: len(notices_in(bot, thread.ts)) == 2, 10)
        await told_once(bot, thread)
    assert bot.api.called("chat.delete")
