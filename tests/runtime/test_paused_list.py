"""`/resume`'s list (`paused_in`), on both backends: a person's own paused threads of the
channel they ask in, whatever the store holds elsewhere, at a cost that does not grow with
it; approvers and admins see every paused thread of the channel."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from agents.testing import ScriptedModel

from bot.runtime import ConversationRuntime
from bot.settings import RuntimeSettings
from storage import ConversationKey, Status, Store
from storage.aws import AwsStore
from testkit.runtime import KEY, SideEffects, asked, build_agent, email_then_answer

ELSEWHERE = 1000
APPROVER, ADMIN = "UAPP", "UADM"


def runtime(store: Store, model: ScriptedModel, effects: SideEffects) -> ConversationRuntime:
    settings = RuntimeSettings(approvers=frozenset({APPROVER}), admins=frozenset({ADMIN}))
    return ConversationRuntime(store, build_agent(model, effects), settings)


def left_interrupted(store: Store, key: ConversationKey, user: str) -> None:
    """Straight through the store (fast): a message of `user`'s, then an interrupted run."""
    kept = store.keep(key, uuid.uuid4().hex, '{"text":"hi"}', participant=user, owner="w")
    assert kept.lease is not None
    store.release(kept.lease, status=Status.INTERRUPTED)


def paused_elsewhere(store: Store, n: int) -> None:
    """A thread awaiting approval or interrupted (half each) of another workspace, in a
    channel of the same id, or of another channel of KEY's workspace: never KEY's channel.
    One write (the thread taken with its status, as by a process that then died), so that a
    thousand take seconds."""
    team, channel = (f"T{n % 4}", KEY.channel) if n % 2 else (KEY.team, f"C{n % 4}")
    key = ConversationKey(team=team, channel=channel, thread_ts=f"1600000000.{n:06d}")
    status = Status.AWAITING_APPROVAL if n // 2 % 2 else Status.INTERRUPTED
    store.acquire(key, f"dead-{n}", status=status)


@dataclass
class Reads:
    requests: int = 0
    items: int = 0  # entries DynamoDB read (before any filter)


@contextmanager
def dynamodb_reads(store: Store) -> Iterator[Reads]:
    """The DynamoDB requests the store sends meanwhile (none on the local backend)."""
    reads = Reads()

    def count(parsed: dict[str, Any], **_: Any) -> None:
        reads.requests += 1
        reads.items += int(parsed.get("ScannedCount", 0))

    if not isinstance(store, AwsStore):
        yield reads
        return
    store.dynamodb.meta.events.register("after-call.dynamodb", count)
    try:
        yield reads
    finally:
        store.dynamodb.meta.events.unregister("after-call.dynamodb", count)


async def listed(rt: ConversationRuntime, user: str) -> list[ConversationKey]:
    return [r.key for r in await rt.queries.paused_in(KEY.team, KEY.channel, user)]


async def test_my_thread_is_listed_among_a_thousand_paused_elsewhere(
    store: Store, effects: SideEffects
) -> None:
    rt = runtime(store, email_then_answer(), effects)
    await asked(rt, event_id="Ev1")
    theirs = ConversationKey(team=KEY.team, channel=KEY.channel, thread_ts="1700000200.000100")
    left_interrupted(store, theirs, "U2")

    with dynamodb_reads(store) as alone:
        assert await listed(rt, "U1") == [KEY]

    # Older than mine, as in the report: a list read least recently active first, across
    # the whole store, found these and not mine.
    clock = store.clock
    store.clock = lambda: clock() - timedelta(days=1)
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda n: paused_elsewhere(store, n), range(ELSEWHERE)))
    store.clock = clock

    with dynamodb_reads(store) as crowded:
        assert await listed(rt, "U1") == [KEY]
    assert crowded == alone  # the same requests, reading the same entries
    if isinstance(store, AwsStore):
        # One query of the channel's partition, reading its two paused threads.
        assert (crowded.requests, crowded.items) == (1, 2), crowded

    assert await listed(rt, "U2") == [theirs]
    assert await listed(rt, "U3") == []  # took part in none
    assert await listed(rt, APPROVER) == [theirs, KEY]  # newest first
    assert await listed(rt, ADMIN) == [theirs, KEY]
    other = await rt.queries.paused_in("T1", KEY.channel, APPROVER)  # another workspace's list
    assert len(other) == 20 and all(r.key.team == "T1" for r in other)
    assert await rt.queries.paused_in("T1", KEY.channel, "U1") == []  # U1 took part in none there
