"""State that never lies: transient storage errors inside tools, notices that agree with the
tool ledger, TTL that really forgets, DynamoDB's transaction limits, discard races, decision
words with nothing pending. Runtime and storage on both backends; faults are injected from
outside the application (a real sqlite lock, botocore's own event system)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.runtime import (
    Answer,
    ConversationRuntime,
    Decided,
    Discarded,
    Notice,
    NoticeKind,
    retry_safe,
)
from bot.runtime.envelope import UserMessage
from bot.runtime.open_calls import NOT_RUN, UNKNOWN_OUTCOME
from bot.settings import RuntimeSettings
from storage import Status, Store, ToolCallStatus
from storage.aws import AwsStore
from testkit.runtime import (
    KEY,
    SideEffects,
    asked,
    build_agent,
    echo_model,
    email_then_answer,
    history,
    kinds,
    last_user_text,
)
from testkit.storage_faults import failing_writes, healed_as_a_serve_gives_up, storage_fault
from tests.conftest import Backend


def email_agent(model: ScriptedModel, effects: SideEffects, on_send: Callable[[], None]) -> Any:
    @function_tool(needs_approval=True)
    def send_email(to: str, body: str) -> str:
        """Send an email (a side effect)."""
        effects.record("send_email", {"to": to})
        on_send()
        return f"sent to {to}"

    return Agent(name="assistant", model=model, tools=[send_email])


# -- 1. a transient storage error inside a tool does not destroy a good run ----------------


async def test_a_transient_storage_error_after_the_side_effect_is_retried(
    store: Store, effects: SideEffects
) -> None:
    with storage_fault(store, seconds=1.0) as start:
        rt = ConversationRuntime(store, email_agent(email_then_answer(), effects, start))
        await asked(rt)
        outcomes = await rt.decide(
            KEY, call_id="call-email", approve=True, user="U1", checkpoint_version=2
        )
    assert [type(o) for o in outcomes] == [Decided, Answer], outcomes
    assert len(effects.calls("send_email")) == 1
    recorded = store.get_tool_call(KEY, "call-email")
    assert recorded is not None and recorded.status is ToolCallStatus.COMPLETED
    assert recorded.output == "sent to ana@example.com"
    record = store.get(KEY)
    assert record is not None and record.status is Status.IDLE
    assert history(store)[2]["output"] == "sent to ana@example.com"


async def test_storage_down_for_longer_interrupts_with_the_checkpoint_kept(
    store: Store, effects: SideEffects
) -> None:
    """Storage fails through every retry after the model answered: the run is interrupted,
    its last checkpoint intact, and the thread is told in plain words (no AWS codes)."""
    holder: dict[str, Callable[[], None]] = {}

    def respond(call: Any) -> Any:
        holder["start"]()
        return [assistant_message("an answer that cannot be saved yet")]

    model = ScriptedModel([ModelStep.respond(respond), [assistant_message("Saved now.")]])
    with storage_fault(store, seconds=2.5) as start:
        holder["start"] = start
        rt = ConversationRuntime(store, build_agent(model, effects))
        outcomes = await rt.handle_message(KEY, event_id="E1", user="U1", text="hello")
        [notice] = [o for o in outcomes if isinstance(o, Notice)]
        assert notice.kind is NoticeKind.RUN_FAILED and notice.reference
        assert "storage" in notice.text and "Nothing was lost" in notice.text
        assert "Throttling" not in notice.text and "sqlite" not in notice.text
    # Healed: the message was never consumed; /resume answers it (once the thread is free:
    # a release that failed too leaves the lease to expire).
    assert len(store.read_inbox(KEY)) == 1
    for _ in range(200):
        record = store.get(KEY)
        # Free for a takeover only past expiry plus the skew margin (as acquire judges it).
        if record is not None and not record.leased(store.takeover_cutoff(store.clock())):
            break
        await asyncio.sleep(0.05)
    again = await rt.scheduler.resume(KEY)
    assert [o.text for o in again if isinstance(o, Answer)] == ["Saved now."], again
    assert store.read_inbox(KEY) == []


async def test_an_unexpected_error_in_a_serve_leaves_the_thread_free_and_is_said(
    store: Store, effects: SideEffects, caplog: pytest.LogCaptureFixture
) -> None:
    """A defect of the bot's own (here its history cache failing) stops the run like a
    storage fault does: the thread is told in plain words with a reference, the error and
    its traceback go to the log, the thread is given up at once (it used to stay held, and
    idle with its message unread, for nobody's recovery), and `/resume` answers it."""
    rt = ConversationRuntime(store, build_agent(echo_model(), effects))
    cached = rt.parts.history.get

    def broken(record: Any) -> Any:
        raise RuntimeError("a defect")

    rt.parts.history.get = broken  # type: ignore[method-assign]
    outcomes = await rt.handle_message(KEY, event_id="E1", user="U1", text="hello")
    [notice] = [o for o in outcomes if isinstance(o, Notice)]
    assert notice.kind is NoticeKind.RUN_FAILED and notice.reference
    assert notice.text.startswith("Something went wrong on my side")
    assert "RuntimeError" not in notice.text and "defect" not in notice.text
    assert any(r.exc_info and notice.reference in r.getMessage() for r in caplog.records)
    record = store.get(KEY)
    assert record is not None and record.lease_owner is None
    assert record.status is Status.INTERRUPTED and len(store.read_inbox(KEY)) == 1
    rt.parts.history.get = cached  # type: ignore[method-assign]
    again = await rt.scheduler.resume(KEY)
    assert [o.text for o in again if isinstance(o, Answer)] == ["echo: hello"]
    assert store.read_inbox(KEY) == []


def saved_later(on_answer: Callable[[], None]) -> ScriptedModel:
    """Answers once (calling `on_answer` first: a fault starts there), then "Saved now."."""

    def respond(call: Any) -> Any:
        on_answer()
        return [assistant_message("an answer that cannot be saved yet")]

    return ScriptedModel([ModelStep.respond(respond), [assistant_message("Saved now.")]])


async def test_a_run_interrupted_by_storage_with_nothing_new_waits_for_resume(
    backend: Backend, effects: SideEffects
) -> None:
    """The run's commit fails through every retry, and the fault ends just before the
    release: the thread is interrupted with its own message still queued, and the recovery
    sweep leaves it alone (a person continues it with /resume)."""
    store, other = backend.open(), backend.open()
    with failing_writes(store) as fault, healed_as_a_serve_gives_up(fault):
        rt = ConversationRuntime(store, build_agent(saved_later(fault.start), effects))
        await rt.handle_message(KEY, event_id="E1", user="U1", text="hello")
    record = store.get(KEY)
    assert record is not None and record.status is Status.INTERRUPTED
    assert record.lease_owner is None and len(store.read_inbox(KEY)) == 1
    sweep = ConversationRuntime(other, build_agent(saved_later(lambda: None), effects))
    assert await sweep.recover() == []
    record = store.get(KEY)
    assert record is not None and record.status is Status.INTERRUPTED
    again = await rt.scheduler.resume(KEY)
    assert [o.text for o in again if isinstance(o, Answer)] == ["Saved now."], again


async def test_a_message_kept_while_storage_failed_is_answered_once_it_answers(
    backend: Backend, effects: SideEffects
) -> None:
    """A second message is kept (by another replica) while the run's commit fails: the run
    gives the thread up, but not as interrupted past that message: the recovery sweep
    answers both once storage answers, with no further message."""
    store, other = backend.open(), backend.open()
    later = UserMessage(user="U1", text="are you there?").model_dump_json()
    with failing_writes(store) as fault, healed_as_a_serve_gives_up(fault):

        def second_message_then_fault() -> None:
            assert other.enqueue(KEY, "E2", later, create=False, participant="U1")
            fault.start()

        model = saved_later(second_message_then_fault)
        rt = ConversationRuntime(store, build_agent(model, effects))
        outcomes = await rt.handle_message(KEY, event_id="E1", user="U1", text="hello")
    [notice] = [o for o in outcomes if isinstance(o, Notice)]
    assert notice.kind is NoticeKind.RUN_FAILED
    sweep = ConversationRuntime(other, build_agent(model, effects))
    answered = await sweep.recover()
    assert [o.text for o in answered if isinstance(o, Answer)] == ["Saved now."], answered
    assert last_user_text(model.calls[-1]).endswith("are you there?")
    record = store.get(KEY)
    assert record is not None and record.status is Status.IDLE
    assert store.read_inbox(KEY) == []
    assert "/resume" not in notice.text  # it said it would pick the thread up itself


async def test_a_holder_that_lost_its_lease_inside_a_tool_stops_quietly(
    store: Store, backend: Backend, effects: SideEffects
) -> None:
    other = backend.open()

    def taken_over() -> None:
        other.acquire(KEY, "admin", force=True)  # e.g. a discard took the thread meanwhile

    rt = ConversationRuntime(store, email_agent(email_then_answer(), effects, taken_over))
    await rt.handle_message(KEY, event_id="E1", user="U1", text="email Ana")
    outcomes = await rt.decide(
        KEY, call_id="call-email", approve=True, user="U1", checkpoint_version=2
    )
    # No "run failed" or "use /resume"; the result is recorded all the same (only this
    # holder ran the call) and the thread is told what became of it.
    decided, late = outcomes
    assert isinstance(decided, Decided) and isinstance(late, Notice)
    assert late.kind is NoticeKind.TOOL_FINISHED_LATE and "`send_email`" in late.text
    assert late.details == ["sent to ana@example.com"]
    assert len(effects.calls("send_email")) == 1
    call = store.get_tool_call(KEY, "call-email")
    assert call is not None and call.status is ToolCallStatus.COMPLETED


# -- 2. setting state aside tells what the ledger says ------------------------------------


async def test_failing_closed_after_a_call_ran_says_it_ran(
    store: Store, effects: SideEffects
) -> None:
    rt = ConversationRuntime(store, build_agent(email_then_answer(), effects))
    await asked(rt)
    # A process ran the approved call, recorded it, and died before its next commit.
    lease, _ = store.acquire(KEY, "dead-process")
    store.begin_tool_call(lease, "call-email", "send_email", '{"to":"ana@example.com"}')
    store.complete_tool_call(lease, "call-email", "sent to ana@example.com")
    store.release(lease, status=Status.RUNNING)
    # The next version of the bot changed the agent's instructions.
    changed = build_agent(email_then_answer(), effects)
    changed.instructions = "Be terse."
    outcomes = await ConversationRuntime(store, changed).recover()
    [notice] = [o for o in outcomes if isinstance(o, Notice) and o.kind.startswith("state")]
    assert "Already done" in notice.text and "`send_email`" in notice.text
    assert "Not run" not in notice.text
    assert history(store)[2] == {
        "type": "function_call_output",
        "call_id": "call-email",
        "output": "sent to ana@example.com",
    }
    assert effects.calls() == []  # never run twice


async def test_discard_mid_tool_says_the_outcome_is_unknown(
    store: Store, effects: SideEffects
) -> None:
    rt = ConversationRuntime(store, build_agent(email_then_answer(), effects))
    await rt.handle_message(KEY, event_id="E1", user="U1", text="email Ana")
    lease, _ = store.acquire(KEY, "process-mid-tool")
    store.begin_tool_call(lease, "call-email", "send_email", "{}")  # started, no result yet
    outcomes = await rt.discard(KEY, by="UADMIN")
    summary = next(o for o in outcomes if isinstance(o, Discarded))
    assert [c.tool_name for c in summary.unknown_calls] == ["send_email"]
    [notice] = [o for o in outcomes if isinstance(o, Notice)]
    assert "outcome unknown" in notice.text and "Not run" not in notice.text
    assert history(store)[2]["output"] == UNKNOWN_OUTCOME


# -- 3. TTL forgets the whole conversation -------------------------------------------------


def aws_store(backend: Backend, why_not_local: str) -> AwsStore:
    """The aws backend's store; on the local one the test is skipped, `why_not_local`."""
    if backend.name != "aws":
        pytest.skip(why_not_local)
    store = backend.open()
    assert isinstance(store, AwsStore)
    return store


async def test_history_rows_expire_with_their_conversation(
    backend: Backend, effects: SideEffects
) -> None:
    store = aws_store(backend, "the local backend deletes an expired conversation's rows with it")
    rt = ConversationRuntime(store, build_agent(echo_model(4), effects))
    await rt.handle_message(KEY, event_id="E1", user="U1", text="my secret is 42")
    rows = store.dynamodb.query(
        TableName=backend.env["BOT_TABLE"],
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"CONV#{KEY}"}},
    )["Items"]
    meta = next(r for r in rows if r["sk"]["S"] == "META")
    for row in rows:  # every row carries the TTL attribute, none outlives the record
        assert int(row["expires_at"]["N"]) <= int(meta["expires_at"]["N"]), row["sk"]
    # What DynamoDB's TTL does once the record's time is up: the record goes first.
    store.dynamodb.delete_item(
        TableName=backend.env["BOT_TABLE"],
        Key={"pk": {"S": f"CONV#{KEY}"}, "sk": {"S": "META"}},
    )
    seen: list[str] = []

    def respond(call: Any) -> Any:
        seen.append(json.dumps(call.input))
        return [assistant_message("hello again")]

    rt2 = ConversationRuntime(
        store, build_agent(ScriptedModel([ModelStep.respond(respond)]), effects)
    )
    outcomes = await rt2.handle_message(KEY, event_id="E2", user="U2", text="hi")
    assert outcomes == [Answer(key=KEY, text="hello again")]
    assert "42" not in seen[0]  # the expired history never reaches the model
    assert kinds(store) == ["user", "message"]


async def test_a_missing_offloaded_item_is_a_gap_not_a_wedge(
    backend: Backend, effects: SideEffects
) -> None:
    store = aws_store(backend, "only the aws backend offloads items to S3")
    posted: list[str] = []

    async def sink(outcome: Any, ref: Any) -> None:
        posted.append(getattr(outcome, "text", ""))

    rt = ConversationRuntime(store, build_agent(echo_model(6), effects), on_outcome=sink)
    await rt.handle_message(KEY, event_id="E1", user="U1", text="log dump:\n" + "x" * 320_000)
    bucket = backend.env["BOT_BUCKET"]
    listed = store.s3.list_objects_v2(Bucket=bucket, Prefix="items/")
    keys = [o["Key"] for o in listed.get("Contents", [])]
    assert keys
    for object_key in keys:  # the bucket's lifecycle rule, some days later
        store.s3.delete_object(Bucket=bucket, Key=object_key)
    outcomes = await rt.handle_message(KEY, event_id="E2", user="U1", text="any update?")
    assert [o.text for o in outcomes if isinstance(o, Answer)] == ["echo: any update?"]
    assert all("items/" not in text for text in posted)
    discarded = await rt.discard(KEY, by="UADMIN")
    assert any(isinstance(o, Discarded) for o in discarded)
    record = store.get(KEY)
    assert record is not None and record.lease_owner is None


# -- 4. DynamoDB's transaction limits ------------------------------------------------------


async def test_a_backlog_of_250_messages_is_consumed_within_transaction_limits(
    backend: Backend, effects: SideEffects
) -> None:
    store = backend.open(lease_seconds=60)
    actions: list[int] = []
    if backend.name == "aws":
        assert isinstance(store, AwsStore)

        def count(params: dict[str, Any], **kwargs: Any) -> None:
            actions.append(len(params["TransactItems"]))

        store.dynamodb.meta.events.register(
            "provide-client-params.dynamodb.TransactWriteItems", count
        )
    seen: list[int] = []

    def respond(call: Any) -> Any:
        items = call.input if isinstance(call.input, list) else [call.input]
        seen.append(len([i for i in items if isinstance(i, dict) and i.get("role") == "user"]))
        return [assistant_message(f"answered {last_user_text(call)}")]

    model = ScriptedModel([ModelStep.respond(respond) for _ in range(20)])
    rt = ConversationRuntime(store, build_agent(model, effects), RuntimeSettings())
    lease, _ = store.acquire(KEY, "a-long-run")  # a long run holds the thread...
    for i in range(250):  # ...while users keep writing (a model outage, say)
        kept = await rt.intake.keep_message(KEY, event_id=f"E{i}", user="U1", text=f"message {i}")
        assert kept.value == "kept"
    store.release(lease)
    outcomes = await rt.recover()
    answers = [o for o in outcomes if isinstance(o, Answer)]
    assert answers and answers[-1].text == "answered message 249"
    assert store.read_inbox(KEY) == []
    users = [i["content"] for i in history(store) if i.get("role") == "user"]
    assert users == [f"<@U1>: message {i}" for i in range(250)]  # each once, in order
    record = store.get(KEY)
    assert record is not None and (record.status, record.lease_owner) == (Status.IDLE, None)
    assert all(n <= 100 for n in actions), max(actions, default=0)


# -- 5. discard races ----------------------------------------------------------------------


async def test_a_message_arriving_during_a_discard_is_answered_after_it(
    store: Store, backend: Backend, effects: SideEffects
) -> None:
    model = ScriptedModel(
        [
            [function_call("send_email", {"to": "ana@example.com", "body": "hi"}, call_id="c1")],
            [assistant_message("I'll call her instead.")],
        ]
    )
    rt = ConversationRuntime(store, build_agent(model, effects))
    await rt.handle_message(KEY, event_id="E1", user="U1", text="email Ana")
    paused_discard, go_on = threading.Event(), threading.Event()
    load = store.load_checkpoint

    def slow_load(pointer: Any) -> Any:  # the discard holds the thread for a moment
        paused_discard.set()
        go_on.wait(10)
        return load(pointer)

    store.load_checkpoint = slow_load  # type: ignore[method-assign]
    discarding = asyncio.create_task(rt.discard(KEY, by="UADMIN"))
    await asyncio.to_thread(paused_discard.wait, 10)
    other = ConversationRuntime(backend.open(), build_agent(echo_model(), effects), owner="B")
    queued = await other.handle_message(KEY, event_id="E2", user="U1", text="call her instead")
    assert [o.kind for o in queued if isinstance(o, Notice)] == [NoticeKind.QUEUED]
    go_on.set()
    store.load_checkpoint = load  # type: ignore[method-assign]
    outcomes = await discarding
    summary = next(o for o in outcomes if isinstance(o, Discarded))
    assert summary.dropped_messages == 0  # it arrived after the discard took the thread
    assert [o.text for o in outcomes if isinstance(o, Answer)] == ["I'll call her instead."]
    assert store.read_inbox(KEY) == []
    assert effects.calls() == []


async def test_a_stale_sweep_leaves_a_conversation_that_became_active(
    store: Store, backend: Backend, effects: SideEffects
) -> None:
    from datetime import timedelta

    from bot.runtime import StaleFilter
    from bot.runtime.queries import PAUSED

    rt = ConversationRuntime(store, build_agent(email_then_answer(), effects))
    await rt.handle_message(KEY, event_id="E1", user="U1", text="email Ana")
    await asyncio.sleep(0.3)
    listed = await rt.queries.stale(timedelta(seconds=0.2))
    assert [r.key for r in listed] == [KEY]  # the sweep's list...
    # ...then someone writes in the thread, before the sweep reaches it.
    await rt.intake.keep_message(KEY, event_id="E2", user="U1", text="still here")
    stale = StaleFilter(statuses=PAUSED, older_than=timedelta(seconds=0.2))
    assert await rt.discard(KEY, by="UADMIN", only_if=stale) == []
    record = store.get(KEY)
    assert record is not None and record.status is Status.RUNNING  # untouched, to be served
    assert len(store.read_inbox(KEY)) == 1
    # A conversation still idle past the age is discarded as before.
    other = KEY.model_copy(update={"thread_ts": "1700000100.000999"})
    rt = ConversationRuntime(store, build_agent(email_then_answer(), effects))
    await rt.handle_message(other, event_id="E3", user="U1", text="email Bo")
    await asyncio.sleep(0.3)
    outcomes = await rt.discard(other, by="UADMIN", only_if=stale)
    assert any(isinstance(o, Discarded) for o in outcomes)


async def test_a_discard_from_a_listing_leaves_a_conversation_changed_since_it_was_listed(
    store: Store, effects: SideEffects
) -> None:
    """As the Home tab's Discard: the conversation as it was listed goes with the discard,
    which goes ahead only if nothing happened there since. Here it is as it was listed again
    (still awaiting the same approval, still idle past the age) but a message came meanwhile:
    only what the listing carries tells it apart."""
    from datetime import timedelta

    from bot.runtime import Listed, StaleFilter
    from bot.runtime.queries import PAUSED

    rt = ConversationRuntime(store, build_agent(email_then_answer(), effects))
    await rt.handle_message(KEY, event_id="E1", user="U1", text="email Ana")
    [shown] = await rt.queries.stale(timedelta(0))
    listed = Listed.of(shown)
    # A message while it waits: kept for after the run, and it waits again as before.
    await rt.handle_message(KEY, event_id="E2", user="U1", text="and cc Bo")
    record = store.get(KEY)
    assert record is not None and record.status is Status.AWAITING_APPROVAL
    still = StaleFilter(statuses=PAUSED, older_than=timedelta(0), listed=listed)
    assert await rt.discard(KEY, by="UADMIN", only_if=still) == []
    record = store.get(KEY)
    assert record is not None and record.status is Status.AWAITING_APPROVAL
    assert record.lease_owner is None  # given back untouched
    # As listed now (read from the listing: on aws, the status index's copy): discarded.
    [shown] = await rt.queries.stale(timedelta(0))
    again = StaleFilter(statuses=PAUSED, older_than=timedelta(0), listed=Listed.of(shown))
    outcomes = await rt.discard(KEY, by="UADMIN", only_if=again)
    assert any(isinstance(o, Discarded) for o in outcomes)
    assert effects.calls() == []


# -- 6. decision words are decisions only while something awaits one ------------------------


async def test_yes_with_nothing_pending_reaches_the_agent(
    store: Store, effects: SideEffects
) -> None:
    seen: list[str] = []

    def respond(call: Any) -> Any:
        seen.append(last_user_text(call))
        return [assistant_message("Shall I file a ticket for that? (yes/no)")]

    model = ScriptedModel([ModelStep.respond(respond) for _ in range(2)])
    rt = ConversationRuntime(store, build_agent(model, effects))
    await rt.handle_message(KEY, event_id="E1", user="U1", text="the printer is broken")
    outcomes = await rt.handle_message(KEY, event_id="E2", user="U1", text="yes")
    assert seen == ["the printer is broken", "yes"]
    assert [type(o) for o in outcomes] == [Answer]


async def test_unknown_retry_safe_tools_are_not_reported_as_not_run(
    store: Store, effects: SideEffects
) -> None:
    """A read-only tool never enters the ledger: closing it says "not run", which is true
    of its side effects (it has none) and never contradicts the ledger."""

    @function_tool
    def lookup(topic: str) -> str:
        """Read-only lookup."""
        return "facts"

    model = ScriptedModel([[function_call("lookup", {"topic": "x"}, call_id="c-look")]])
    agent = Agent(name="assistant", model=model, tools=[retry_safe(lookup)])
    lease, _ = store.acquire(KEY, "p")
    store.append_items(
        KEY,
        [
            json.dumps(
                {"type": "function_call", "call_id": "c-look", "name": "lookup", "arguments": "{}"}
            )
        ],
        lease,
    )
    store.release(lease, status=Status.AWAITING_APPROVAL)
    outcomes = await ConversationRuntime(store, agent).discard(KEY, by=None)
    [notice] = [o for o in outcomes if isinstance(o, Notice)]
    assert notice.text.startswith("An operator discarded") and "Not run: `lookup`" in notice.text
    assert history(store)[-1]["output"] == NOT_RUN
