"""Expiry over real processes (`python -m bot serve`), on both backends: runs paused for
approval, the bot stopped and kept down past `BOT_STATE_TTL`, then started again; on aws,
what DynamoDB's TTL would have deleted meanwhile is deleted from outside (DynamoDB Local does
not run TTL). Then each way a person comes back to such a thread (a reply, Approve, the Stop
control, the reply `stop`, `/resume` with the thread's link) gets the thread told once, in
one notice everyone sees, the approval card closed, the tool not run; and a mention after
that starts a fresh conversation."""

from __future__ import annotations

import asyncio
import copy
import json
import signal
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import boto3
import pytest

from bot.permalink import permalink
from bot.runtime import EXPIRED, EXPIRED_RESUME, EXPIRED_STOP
from bot.slackapp.agent_blocks import STOP
from bot.slackapp.blocks import APPROVE
from bot.standin.slack_api import Message
from storage import ConversationKey, Status
from testkit.deployment import Deployment, deployment
from testkit.responses import ScriptedResponses, message, tool_call, user_texts
from testkit.services import wait_until
from testkit.slack import CHANNEL, Harness, thread_key
from tests.conftest import Backend

pytestmark = pytest.mark.slow
ALICE = "UALICE"
TRIGGERS = ("reply", "approve", "stop_control", "reply_stop", "resume")


class ByRequest(ScriptedResponses):
    """Answers from the request alone (the threads run concurrently): `transfer` asks for
    the tool, a request saying `slowly` is held until `release` is set (a run that works long
    enough to be offered Stop), anything else is answered."""

    def __init__(self) -> None:
        super().__init__([])
        self.release = threading.Event()

    def next_output(self, request: dict[str, Any], headers: dict[str, str]) -> list[dict[str, Any]]:
        with self.lock:
            self.requests.append(request)
            self.headers.append(headers)
            number = len(self.requests)
        said = (user_texts(request) or [""])[-1]
        if "slowly" in said:
            self.release.wait(60)
        if "transfer" in said:
            return [tool_call("transfer", {"amount": 5, "to": "bob"}, f"call-{number}")]
        return [message(f"Fresh answer to: {said}")]


def notices(bot: Deployment, ts: str, kind: str) -> list[Message]:
    """The thread's notices of `kind` that everyone sees."""
    return [
        m
        for m in bot.api.bot_replies(CHANNEL, ts)
        if ((m.metadata or {}).get("event_payload") or {}).get("notice") == kind
    ]


def has_buttons(card: Message) -> bool:
    return any(block.get("type") == "actions" for block in card.blocks or [])


def expire_rows_as_dynamodb_ttl_would(table: str, key: ConversationKey) -> int:
    """Delete every row of the conversation whose `expires_at` passed, except its record
    (whose own TTL is the tombstone's, far later). Returns how many were deleted."""
    dynamodb = boto3.client("dynamodb")
    now = int(time.time())
    deleted = 0
    pages = dynamodb.get_paginator("query").paginate(
        TableName=table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"CONV#{key}"}},
    )
    for page in pages:
        for item in page["Items"]:
            expires = int(item.get("expires_at", {}).get("N", str(1 << 62)))
            if item["sk"]["S"] != "META" and expires < now:
                dynamodb.delete_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]})
                deleted += 1
    return deleted


async def test_every_way_back_into_an_expired_thread_tells_it_once(
    backend: Backend, tmp_path: Path
) -> None:
    script = ByRequest()
    async with deployment(
        backend, tmp_path, script, BOT_STATE_TTL="3s", BOT_LEASE_SECONDS="2"
    ) as bot:
        # A workspace without agent sessions: the bot's own Stop control is offered (Slack's
        # session stop is tested in test_container.py).
        bot.api.method_errors["agents.sessions.setStatus"] = "not_allowed_token_type"
        await bot.start()
        people = bot.people()
        try:
            await _expired_threads_are_told(bot, people, script, backend)
        finally:
            await people.close()


async def _expired_threads_are_told(
    bot: Deployment, people: Harness, script: ByRequest, backend: Backend
) -> None:
    api = bot.api
    # The slow run works long enough for its requester to be offered Stop; the others ask
    # meanwhile, so that all pause within a moment of each other (the TTL is 3 s).
    slow = await bot.mention(ALICE, "transfer 5 to bob (stop_control) slowly")
    [offer] = await api.wait_for(
        lambda: [
            m
            for m in api.thread(CHANNEL, slow.ts)
            if m.ephemeral_to == ALICE and STOP in json.dumps(m.blocks)
        ],
        within=20,
    )
    threads = {"stop_control": slow.ts}
    for name in TRIGGERS:
        if name != "stop_control":
            threads[name] = (await bot.mention(ALICE, f"transfer 5 to bob ({name})")).ts
    script.release.set()
    cards: dict[str, Message] = {}
    for name, ts in threads.items():

        def card(ts: str = ts) -> list[Message]:
            return [m for m in api.bot_replies(CHANNEL, ts) if has_buttons(m)]

        [shown] = await api.wait_for(card, within=20)
        cards[name] = copy.deepcopy(shown)  # as the person saw it before the expiry
    keys = {name: thread_key(ts) for name, ts in threads.items()}

    def paused() -> bool:  # (or paused, then expired already)
        records = [bot.store.get(key) or bot.store.expired_record(key) for key in keys.values()]
        return all(
            r is not None and r.status is Status.AWAITING_APPROVAL and r.lease_owner is None
            for r in records
        )

    await asyncio.to_thread(wait_until, paused, 20)
    # Down past the TTL: SIGTERM on one backend, SIGKILL on the other.
    stop = signal.SIGTERM if backend.name == "local" else signal.SIGKILL
    await bot.signal(stop)
    await asyncio.to_thread(
        wait_until, lambda: all(bot.store.get(key) is None for key in keys.values()), 20
    )
    if backend.name == "aws":
        deleted = [
            expire_rows_as_dynamodb_ttl_would(backend.env["BOT_TABLE"], k) for k in keys.values()
        ]
        assert all(deleted), deleted  # history and tool ledger rows went with the state
    await bot.start()

    # Each person comes back, one way each.
    await people.reply(ALICE, "yes", threads["reply"])
    status, approve_token = await people.press(cards["approve"], APPROVE, ALICE)
    assert status == 200
    status, stop_token = await people.press(offer, STOP, ALICE)
    assert status == 200
    await people.reply(ALICE, "stop", threads["reply_stop"])
    status, resume_token = await people.command(
        "/resume", permalink(keys["resume"]), ALICE, channel=CHANNEL
    )
    assert status == 200

    # Told privately, where the person asked in private.
    [refused] = await people.responses_for(approve_token)
    assert refused["text"] == EXPIRED and refused.get("replace_original") is not True
    [stopped] = await people.responses_for(stop_token)
    assert stopped["text"] == EXPIRED_STOP
    [resumed] = await people.responses_for(resume_token)
    assert EXPIRED_RESUME in resumed["text"]

    # Told in the thread, once each; every card closed.
    for name, ts in threads.items():

        def told_in(ts: str = ts) -> list[Message]:
            return notices(bot, ts, "state_expired")

        def closed(card: Message = cards[name]) -> bool:
            return not has_buttons(api.messages[(CHANNEL, card.ts)])

        [told] = await api.wait_for(told_in, within=20)
        assert "saved state expired" in told.text
        assert "`transfer` (waiting for approval) was not run" in told.text, told.text
        await api.wait_for(closed)
        assert "see below" in json.dumps(api.messages[(CHANNEL, cards[name].ts)].blocks)
    assert "“yes”" in notices(bot, threads["reply"], "state_expired")[0].text  # never answered

    # A mention afterwards starts afresh: answered, with none of the old conversation.
    for name, ts in threads.items():
        await people.mention(ALICE, f"hello again ({name})", thread_ts=ts)
    for name, ts in threads.items():

        def answered(ts: str = ts, name: str = name) -> list[Message]:
            return [
                m
                for m in api.bot_replies(CHANNEL, ts)
                if "Fresh answer to:" in (shown := m.text + m.streamed)
                and f"hello again ({name})" in shown
            ]

        await api.wait_for(answered, within=20)
        [request] = [
            r for r in script.requests if f"hello again ({name})" in " ".join(user_texts(r))
        ]
        # None of the old run: no call, no output; only what the thread shows is read again,
        # as any conversation that starts inside a thread reads it (its thread context).
        kinds = [i.get("type") for i in request["input"] if isinstance(i, dict)]
        assert "function_call" not in kinds and "function_call_output" not in kinds, kinds
        texts = user_texts(request)
        assert texts[-1].endswith(f"hello again ({name})"), texts
        assert all(t.startswith("Earlier messages in this Slack thread") for t in texts[:-1])
    await asyncio.sleep(1)  # anything told twice, or run late, would show by now
    for ts in threads.values():
        # Once per expiry: a second notice only once the fresh state expired as well (on a
        # loaded machine, a mention more than the 3 s TTL after the first notice).
        told = [float(m.ts) for m in notices(bot, ts, "state_expired")]
        assert told and all(later - earlier >= 3 for earlier, later in pairwise(told)), told
    assert bot.transfers() == []  # the tool never ran
    # The model was asked once per thread before the expiry, and once per fresh mention.
    assert len(script.requests) == 2 * len(TRIGGERS)
