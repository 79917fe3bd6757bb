"""A run paused for a person's decision is listed for who may decide it (the Home tab) from
the release that pauses it, which comes after the request's post: surfaces are told then
(`AwaitingDecision`), once per request. A listing that names a conversation that just began
waiting finds it even where the index does not show it yet (DynamoDB's indexes are
eventually consistent). Both backends."""

from __future__ import annotations

import sqlite3
from typing import Any

from bot.runtime import ApprovalRequest, ConversationRuntime
from bot.settings import RuntimeSettings
from storage import ConversationKey, PersonKey, Status, Store
from storage.aws import AwsStore
from storage.aws.layout import meta_key
from storage.local import LocalStore
from testkit.runtime import KEY, SideEffects, build_agent, decide, email_then_answer

ALICE, BOB, APPROVER = "U1", "U2", "UAPPROVER"


async def test_the_pause_is_told_once_its_release_lists_it(
    store: Store, effects: SideEffects
) -> None:
    seen: list[tuple[str, Status | None, list[ConversationKey]]] = []

    async def sink(outcome: Any, *_: Any) -> None:
        record = store.get(KEY)
        listed = [r.key for r in store.list_waiting_on(KEY.team, ALICE)]
        seen.append((type(outcome).__name__, record.status if record else None, listed))

    settings = RuntimeSettings(approvers=frozenset({APPROVER}))
    rt = ConversationRuntime(
        store, build_agent(email_then_answer(), effects), settings, on_outcome=sink
    )
    await rt.handle_message(KEY, event_id="E1", user=ALICE, text="email Ana")
    # The request is posted before the release that lists it; the pause is told after.
    assert seen == [
        ("ApprovalRequest", Status.RUNNING, []),
        ("AwaitingDecision", Status.AWAITING_APPROVAL, [KEY]),
    ]
    seen.clear()
    # A reply while it waits is kept for later; no new request, nothing new to list.
    await rt.handle_message(KEY, event_id="E2", user=ALICE, text="and cc Bo")
    assert [name for name, _, _ in seen] == ["Notice"]


async def test_a_listing_that_names_a_conversation_finds_it_before_the_index_does(
    store: Store, effects: SideEffects
) -> None:
    settings = RuntimeSettings(approvers=frozenset({APPROVER}))
    rt = ConversationRuntime(store, build_agent(email_then_answer(), effects), settings)
    [request] = [
        o
        for o in await rt.handle_message(KEY, event_id="E1", user=ALICE, text="email Ana")
        if isinstance(o, ApprovalRequest)
    ]
    unindexed(store, KEY)  # as a DynamoDB index that has not caught up yet
    alice, bob, approver = (PersonKey.of(KEY, user) for user in (ALICE, BOB, APPROVER))
    assert await rt.queries.waiting_for(alice) == []
    [found] = await rt.queries.waiting_for(alice, [KEY])
    assert (found.record.key, found.version, found.requested_by) == (
        KEY,
        request.checkpoint_version,
        ALICE,
    )
    assert [c.call_id for c in found.calls] == [c.call_id for c in request.calls]
    [found] = await rt.queries.waiting_for(approver, [KEY])
    assert found.record.key == KEY
    assert await rt.queries.waiting_for(bob, [KEY]) == []  # not his to decide
    elsewhere = PersonKey(team="T2", user=ALICE)
    assert await rt.queries.waiting_for(elsewhere, [KEY]) == []  # another workspace's Alice
    # Once decided, naming it lists nothing.
    await decide(rt, request, request.calls[0].call_id, approve=False, user=ALICE)
    assert await rt.queries.waiting_for(alice, [KEY]) == []


def unindexed(store: Store, key: ConversationKey) -> None:
    """Take the conversation out of the approval listing's index, from outside the store."""
    if isinstance(store, LocalStore):
        db = sqlite3.connect(store.db_path)
        db.execute(
            "UPDATE conversations SET waiting_ws = NULL"
        )  # its partial index: listed no more
        db.commit()
        db.close()
    else:
        assert isinstance(store, AwsStore)
        store.dynamodb.update_item(
            TableName=store.table,
            Key=meta_key(key),
            UpdateExpression="REMOVE waiting_ws",  # a sparse index lists only items with it
        )
