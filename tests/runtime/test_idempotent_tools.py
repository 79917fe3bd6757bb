"""Keyed tools (issue 29), in process, on both backends: a call cut short after the keyed
service applied it is run again with the same key by whoever continues the run, and ends
done (the service shows one effect); an unkeyed tool in the same place still says "outcome
unknown"; attempts are bounded; keys are stable per call and differ between calls."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext

from bot.runtime import (
    Answer,
    ConversationRuntime,
    Notice,
    NoticeKind,
    idempotent,
)
from bot.runtime.request_context import RequestContext
from bot.settings import RuntimeSettings
from storage import ConversationKey, Lease, ToolCallClaim, ToolCallStatus
from testkit.keyed_service import KeyedService, call, keyed_service
from testkit.runtime import KEY, asked, decide
from tests.conftest import Backend


@pytest.fixture
def service() -> Iterator[KeyedService]:
    with keyed_service() as running:
        yield running


class Deaths:
    """How many times the process "dies" right after the service answered a charge."""

    def __init__(self, times: int) -> None:
        self.left = times
        self.died = asyncio.Event()  # set when a charge is cut short, cleared by the test


def charging_agent(service: KeyedService, *, keyed: bool, die_after: Deaths) -> Agent[Any]:
    """`charge` applies an effect at the keyed service, then (while `die_after` has turns
    left) hangs as if its process died right there."""

    @function_tool(needs_approval=True)
    async def charge(ctx: ToolContext[RequestContext], amount: int) -> str:
        """Charge the customer (a side effect)."""
        key = ctx.context.idempotency_key(ctx.tool_call_id)
        result = await asyncio.to_thread(call, service.url, key, f"charge {amount}")
        if die_after.left:
            die_after.left -= 1
            die_after.died.set()
            await asyncio.Event().wait()  # never returns: the "process" is cancelled here
        return f"charged: {result['id']}"

    model = ScriptedModel(
        [[function_call("charge", {"amount": 9}, call_id="c-9")], [assistant_message("done")]] * 3
    )
    return Agent(name="shop", model=model, tools=[idempotent(charge) if keyed else charge])


async def approved_charge(rt: ConversationRuntime) -> asyncio.Task[Any]:
    """Ask for the charge and approve it: the decision's serve runs it, in the background."""
    request = await asked(rt, "charge 9")
    return asyncio.create_task(decide(rt, request, "c-9"))


async def killed_after_the_effect(
    backend: Backend, service: KeyedService, *, keyed: bool, attempts: int = 3, deaths: int = 1
) -> tuple[list[Any], Any]:
    """Approve the charge; the process dies `deaths` times right after the service applied
    it; then a new process continues the run (recovery)."""
    settings = RuntimeSettings(idempotent_attempts=attempts)
    die_after = Deaths(deaths)
    agent = charging_agent(service, keyed=keyed, die_after=die_after)
    store = backend.open(lease_seconds=1, lease_skew_seconds=0)
    running = await approved_charge(ConversationRuntime(store, agent, settings))
    for _ in range(deaths):
        await asyncio.wait_for(die_after.died.wait(), 30)
        die_after.died.clear()
        running.cancel()  # the process dies; the thread is given up as running
        await asyncio.gather(running, return_exceptions=True)
        later = ConversationRuntime(backend.open(), agent, settings)
        running = asyncio.create_task(later.recover())
    outcomes = await running
    return outcomes, backend.open().get_tool_call(KEY, "c-9")


async def test_a_keyed_call_cut_short_is_run_again_with_its_key_and_ends_done(
    backend: Backend, service: KeyedService
) -> None:
    outcomes, ledger = await killed_after_the_effect(backend, service, keyed=True)
    assert len(service.effects) == 1 and len(service.requests) == 2
    assert len(set(service.keys())) == 1  # the same key, both attempts
    assert Answer(key=KEY, text="done") in outcomes
    [notice] = [
        o
        for o in outcomes
        if isinstance(o, Notice) and o.kind is not NoticeKind.RESUMED_AFTER_RESTART
    ]
    assert notice.kind is NoticeKind.TOOL_COMPLETED_AFTER_RESTART
    assert "`charge`" in notice.text and "completed" in notice.text
    assert ledger is not None and ledger.status is ToolCallStatus.COMPLETED
    assert ledger.attempts == 2 and ledger.output == "charged: effect-1"


async def test_an_unkeyed_call_cut_short_is_still_of_unknown_outcome(
    backend: Backend, service: KeyedService
) -> None:
    outcomes, ledger = await killed_after_the_effect(backend, service, keyed=False)
    assert len(service.requests) == 1  # never run again
    assert [o.kind for o in outcomes if isinstance(o, Notice)][-1] is (
        NoticeKind.TOOL_OUTCOME_UNKNOWN
    )
    assert ledger is not None and ledger.status is ToolCallStatus.STARTED


async def test_a_keyed_call_is_not_looped_for_ever(backend: Backend, service: KeyedService) -> None:
    outcomes, ledger = await killed_after_the_effect(
        backend, service, keyed=True, attempts=2, deaths=2
    )
    assert len(service.requests) == 2 and len(service.effects) == 1
    assert NoticeKind.TOOL_OUTCOME_UNKNOWN in [o.kind for o in outcomes if isinstance(o, Notice)]
    assert ledger is not None and ledger.status is ToolCallStatus.STARTED and ledger.attempts == 2


def test_keys_are_stable_per_call_and_differ_between_calls() -> None:
    def key(
        team: str,
        channel: str,
        thread: str,
        call_id: str,
        enterprise: str | None = None,
        generation: int = 1700000000000,
    ) -> str:
        where = ConversationKey(team=team, channel=channel, thread_ts=thread, enterprise=enterprise)
        context = RequestContext(
            team=where.team,
            channel=where.channel,
            thread_ts=where.thread_ts,
            user="U1",
            enterprise=where.enterprise,
            generation=generation,
        )
        return context.idempotency_key(call_id)

    base = key("T1", "C1", "1.1", "call-a")
    assert key("T1", "C1", "1.1", "call-a") == base  # every attempt, every replica
    others = {
        key("T2", "C1", "1.1", "call-a"),
        key("T1", "C2", "1.1", "call-a"),
        key("T1", "C1", "1.2", "call-a"),
        key("T1", "C1", "1.1", "call-b"),
        key("T1", "C1", "1.1", "call-a", enterprise="E1"),
        key("T1", "C1", "1.1", "call-a", generation=1700000099999),  # after an expiry
        key("T1", "C1", "1.1", "call-a", generation=0),  # (rows made before generations)
    }
    assert base not in others and len(others) == 7
    assert len(base) <= 255 and base.replace("-", "").replace("_", "").isalnum()


async def test_a_result_recorded_while_the_call_is_taken_over_is_its_result(
    backend: Backend, service: KeyedService
) -> None:
    """Chaos seed 1000 (aws, a loaded machine): the serve running a charge lost its lease
    (too slow to renew it), and recorded its result just after the next holder found the call
    `started`, before that holder could start it again. The result is the call's: it is not
    said to be of unknown outcome, nor run again."""
    dies = Deaths(1)
    agent = charging_agent(service, keyed=True, die_after=dies)
    store = backend.open(lease_seconds=1, lease_skew_seconds=0)
    deciding = await approved_charge(ConversationRuntime(store, agent))
    await asyncio.wait_for(dies.died.wait(), 30)
    held = store.get(KEY)  # the lease the charge runs under
    assert held is not None and held.lease_owner and held.lease_expires_at
    deciding.cancel()  # its result is recorded below, as if it came back late
    await asyncio.gather(deciding, return_exceptions=True)
    its_lease = Lease(
        key=KEY,
        owner=held.lease_owner,
        fence=held.fence,
        expires_at=held.lease_expires_at,
        generation=held.generation,
    )
    later_store = backend.open()
    begin = later_store.begin_tool_call

    def begin_while_the_first_records(
        lease: Lease, call_id: str, tool_name: str, arguments: str
    ) -> ToolCallClaim:
        claim = begin(lease, call_id, tool_name, arguments)
        assert claim.record.status is ToolCallStatus.STARTED
        assert store.complete_tool_call(its_lease, call_id, "charged: effect-1") is False
        return claim

    later_store.begin_tool_call = begin_while_the_first_records  # type: ignore[method-assign]
    outcomes = await ConversationRuntime(later_store, agent).recover()
    assert len(service.requests) == 1  # not run again
    kinds = [o.kind for o in outcomes if isinstance(o, Notice)]
    assert NoticeKind.TOOL_OUTCOME_UNKNOWN not in kinds, outcomes
    assert Answer(key=KEY, text="done") in outcomes
    ledger = backend.open().get_tool_call(KEY, "c-9")
    assert ledger is not None and ledger.status is ToolCallStatus.COMPLETED
    assert ledger.attempts == 1 and ledger.output == "charged: effect-1"
