"""Messages refused at a full backlog are told in the thread even when the process that
refused them dies before its notice (it waits a second for the rest of a burst): the
refusal is on the record, and the replica holding the thread tells it as it lets go, once,
under the id the dead process would have posted it with, on both backends. A notice naming
more than one a dead process posted is a post of its own (the Slack layer deletes later
copies of one id: the refusals only it names would be lost with it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from agents.testing import ModelStep, ScriptedModel, assistant_message

from bot.runtime import ConversationRuntime, DeliveryRef, Kept, Notice, NoticeKind
from bot.runtime import backlog_refusals as refusals
from storage import Refusal, Status, Store
from testkit.runtime import KEY, SideEffects, build_agent
from tests.conftest import Backend


def gated_model(gate: asyncio.Event, started: asyncio.Event) -> ScriptedModel:
    async def respond(call: Any) -> Any:
        started.set()
        await gate.wait()  # the run holds the thread until the test lets it go
        return [assistant_message("Done with the first.")]

    return ScriptedModel([ModelStep.respond(respond), [assistant_message("Read the rest.")]])


async def holding(
    store: Store, effects: SideEffects, watch: Callable[[Any], None] = lambda _: None
) -> tuple[ConversationRuntime, list[tuple[Any, DeliveryRef]], asyncio.Event, asyncio.Task[Any]]:
    """A runtime whose run holds the thread (its first message waits in the backlog too)
    until `gate` is set; what it tells the thread goes to `told`."""
    told: list[tuple[Any, DeliveryRef]] = []

    async def sink(outcome: Any, ref: DeliveryRef) -> None:
        told.append((outcome, ref))
        watch(outcome)

    gate, started = asyncio.Event(), asyncio.Event()
    rt = ConversationRuntime(
        store, build_agent(gated_model(gate, started), effects), on_outcome=sink, owner="A"
    )
    running = asyncio.create_task(rt.handle_message(KEY, event_id="E1", user="U1", text="hi"))
    await started.wait()
    return rt, told, gate, running


async def test_a_refusal_whose_process_died_is_told_by_the_holder(
    backend: Backend, effects: SideEffects, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(refusals, "TELL_AFTER", timedelta(seconds=1))
    store = backend.open(lease_seconds=5, lease_skew_seconds=0.2, backlog_limit=3)
    rt, told, gate, running = await holding(store, effects)
    for number in (2, 3):  # the backlog fills up
        kept = await rt.intake.keep_message(
            KEY, event_id=f"E{number}", user="U1", text=f"more {number}"
        )
        assert kept is Kept.KEPT
    # Another replica refuses E4 and dies before its notice: only the record knows.
    await refuse(store, "E4", "and this one please")
    gate.set()
    await asyncio.wait_for(running, 20)
    notices = [
        (o, ref) for o, ref in told if isinstance(o, Notice) and o.kind is NoticeKind.NOT_TAKEN
    ]
    assert len(notices) == 1, notices
    notice, ref = notices[0]
    assert "couldn't take 1 message (from <@U2>)" in notice.text
    assert notice.details == ["“and this one please”"]
    # Named as the refusing process would have named it, and looked for before posting.
    assert ref == DeliveryRef(refusals.delivery_id(["E4"], 0), maybe_posted=True)
    record = store.get(KEY)
    assert record is not None and not record.refusals_untold
    assert (record.status, record.lease_owner) == (Status.IDLE, None)


async def refuse(store: Store, event_id: str, text: str) -> None:
    """Another replica refuses a message (and dies before it tells it)."""
    payload = json.dumps({"user": "U2", "text": text})
    refused = await asyncio.to_thread(
        store.keep, KEY, event_id, payload, create=False, participant="U2", refusal_text=text
    )
    assert refused.refused and refused.named


async def test_a_notice_naming_more_than_a_dead_tellers_is_a_post_of_its_own(
    backend: Backend, effects: SideEffects, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chaos seed 1000 (aws, a SIGSTOP): a teller posted E4's notice and froze before marking
    it told; E5 was refused meanwhile. The holder's notice names both: under E4's id it
    was deleted as a copy of the first, and E5 was never told."""
    monkeypatch.setattr(refusals, "TELL_AFTER", timedelta(seconds=1))
    store = backend.open(lease_seconds=5, lease_skew_seconds=0.2, backlog_limit=3)
    rt, told, gate, running = await holding(store, effects)
    for number in (2, 3):
        await rt.intake.keep_message(KEY, event_id=f"E{number}", user="U1", text=f"more {number}")
    await refuse(store, "E4", "first refused")
    first_post = refusals.delivery_id(["E4"], 0)  # what the frozen teller posted
    await refuse(store, "E5", "refused later")
    gate.set()
    await asyncio.wait_for(running, 20)
    notices = [(o, r) for o, r in told if isinstance(o, Notice)]
    # Told together (E4 may also come due first, on a slow machine: then in two notices).
    assert [d for o, _ in notices for d in o.details] == ["“first refused”", "“refused later”"]
    [later] = [r for o, r in notices if "“refused later”" in o.details]
    assert later.id != first_post and later.maybe_posted
    if len(notices) == 1:
        assert later.id == refusals.delivery_id(["E4", "E5"], 0)
    record = store.get(KEY)
    assert record is not None and not record.refusals_untold


async def test_the_refusing_process_tells_once_and_marks_them_told(
    backend: Backend, effects: SideEffects
) -> None:
    store = backend.open(lease_seconds=5, lease_skew_seconds=0.2, backlog_limit=3)
    rt, told, gate, running = await holding(store, effects)
    for number in range(2, 7):  # two kept, three refused
        await rt.intake.keep_message(KEY, event_id=f"E{number}", user="U3", text=f"more {number}")
    await asyncio.sleep(refusals.GATHER_SECONDS + 0.5)
    [(notice, ref)] = [(o, ref) for o, ref in told if isinstance(o, Notice)]
    assert notice.kind is NoticeKind.NOT_TAKEN and "couldn't take 3 messages" in notice.text
    # Looked for first: a serve elsewhere may have told them while this process was frozen.
    assert ref == DeliveryRef(refusals.delivery_id(["E4", "E5", "E6"], 0), maybe_posted=True)
    record = store.get(KEY)
    assert record is not None and not record.refusals_untold  # told: no one tells it again
    gate.set()
    await asyncio.wait_for(running, 20)
    assert len([o for o, _ in told if isinstance(o, Notice)]) == 1


def test_notices_that_name_no_refusal_have_ids_of_their_own() -> None:
    """A notice naming none of its refusals (the record's list full, each only counted) used
    to be `not_taken.<hash of "1">` in every burst: a second burst's notice was the first's
    "copy", which the Slack layer deletes (chaos 150262)."""
    assert refusals.delivery_id([], 1, ["E7"]) == refusals.delivery_id([], 1, ["E7"])
    assert refusals.delivery_id([], 1, ["E7"]) != refusals.delivery_id([], 1, ["E9"])
    assert refusals.delivery_id([], 1) != refusals.delivery_id([], 1)  # whose, unknown
    # Named refusals still give the id any teller of them finds.
    assert refusals.delivery_id(["E4"], 1, ["E5"]) == refusals.delivery_id(["E4"], 1)


@pytest.mark.parametrize("told_by_then", ["before the wait", "during the wait"])
async def test_a_holder_does_not_wait_for_refusals_their_process_told(
    backend: Backend, effects: SideEffects, monkeypatch: pytest.MonkeyPatch, told_by_then: str
) -> None:
    """Chaos seed 180065 (aws): the refusing process told its refusal while the holder's
    record still listed it; the holder waited until it was due, then dated the thread's
    activity to its release, 4 s after its last post: the state outlived its TTL, and a
    reply after it was answered instead of told that the state had expired."""
    monkeypatch.setattr(refusals, "TELL_AFTER", timedelta(seconds=5))
    store = backend.open(lease_seconds=10, backlog_limit=3)
    answers: list[Any] = []
    answered = asyncio.Event()

    def watch(outcome: Any) -> None:
        if not isinstance(outcome, Notice):
            answers.append(outcome)
            if len(answers) == 2:  # its last answer: the holder is about to let go
                answered.set()

    rt, told, gate, running = await holding(store, effects, watch)
    for number in (2, 3):
        await rt.intake.keep_message(KEY, event_id=f"E{number}", user="U1", text=f"more {number}")
    await refuse(store, "E4", "refused")  # the holder's next read lists it

    async def its_process_tells() -> datetime:
        await answered.wait()
        answered_at = store.clock()
        if told_by_then == "during the wait":
            await asyncio.sleep(1)
        await asyncio.to_thread(store.refusals_told, KEY, ["E4"], 0)
        return answered_at

    telling = asyncio.create_task(its_process_tells())
    gate.set()
    await asyncio.wait_for(running, 20)
    answered_at = await telling
    assert not [o for o, _ in told if isinstance(o, Notice)]  # told by its process only
    record = store.get(KEY)
    assert record is not None and record.lease_owner is None and not record.refusals_untold
    assert record.last_activity_at <= answered_at + timedelta(seconds=1), (answered_at, record)


def test_a_refused_message_without_text_is_named_never_quoted_empty() -> None:
    """A message of files alone refused at the cap is named as such: the thread was told of
    `• “”` (issue 49, where the empty refusals were a stop and a click, which are never
    refused now)."""
    refusal = Refusal(event_id="E9", user="U2", text="  ", at=datetime.now(UTC))
    told = refusals.notice(KEY, [refusal])
    assert told.details == ["(a message without text)"]
    assert "couldn't take 1 message (from <@U2>)" in told.text
