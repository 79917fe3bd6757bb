"""Function tools whose call got no answer (issue 49), in process, on both backends: a call
that timed out (the tool's own `timeout_seconds`, or a timeout its client raised) may have
taken effect, so it stays `started`, the model and the thread are told its outcome is
unknown, and it is not sent again; a keyed one is sent again with its key (the service
applies it once) and ends done. (MCP calls: `test_mcp_servers.py`.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, FunctionTool, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext

from bot.runtime import Answer, ConversationRuntime, Notice, NoticeKind, idempotent
from bot.runtime.request_context import RequestContext
from bot.runtime.tool_failures import NoAnswer, no_answer
from bot.settings import RuntimeSettings
from storage import Store, ToolCallStatus
from testkit.keyed_service import KeyedService, call, keyed_service
from testkit.runtime import KEY

CLIENT_TIMEOUT = 1.0  # what the tools below wait for the service's answer
LATE = 5.0  # how long the service waits before answering a late request


@pytest.fixture
def service() -> Iterator[KeyedService]:
    with keyed_service() as running:
        yield running


def charging(service: KeyedService) -> FunctionTool:
    """`charge` posts to the keyed service and waits `CLIENT_TIMEOUT` for its answer (its
    HTTP client raises `TimeoutError` then)."""

    @function_tool
    async def charge(ctx: ToolContext[RequestContext], amount: int) -> str:
        """Charge the customer (a side effect)."""
        key = ctx.context.idempotency_key(ctx.tool_call_id)
        answer = await asyncio.to_thread(
            call, service.url, key, f"charge {amount}", timeout=CLIENT_TIMEOUT
        )
        return f"charged: {answer['id']}"

    return charge


async def charged(store: Store, tool: FunctionTool, attempts: int = 3) -> tuple[list[Any], Any]:
    """Ask for a charge (it needs no person): the outcomes, and what the model was given
    back for the call."""
    model = ScriptedModel(
        [[function_call(tool.name, {"amount": 9}, call_id="c-9")], [assistant_message("done")]]
    )
    agent = Agent(name="shop", model=model, tools=[tool])
    rt = ConversationRuntime(store, agent, RuntimeSettings(idempotent_attempts=attempts))
    try:
        outcomes = await rt.handle_message(KEY, event_id="E1", user="U1", text="charge 9")
    finally:
        await rt.close()
    [given] = [
        item.get("output")
        for item in model.calls[-1].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    return outcomes, given


def unknown_notice(outcomes: list[Any]) -> str:
    [notice] = [o for o in outcomes if isinstance(o, Notice)]
    assert notice.kind is NoticeKind.TOOL_OUTCOME_UNKNOWN
    return notice.text


async def test_a_call_past_its_own_time_limit_is_of_unknown_outcome(store: Store) -> None:
    """`timeout_seconds` (`@function_tool(timeout=...)`): the SDK would tell the model "timed
    out" and let it try again; the guard takes the limit over, and the call whose effect
    happened before the limit is of unknown outcome."""
    effects: list[int] = []

    @function_tool(timeout=CLIENT_TIMEOUT)
    async def transfer(amount: int) -> str:
        """Transfer money (a side effect)."""
        effects.append(amount)
        await asyncio.sleep(LATE)  # the bank has it; its answer comes too late
        return "transferred"

    outcomes, given = await charged(store, transfer)
    assert "`transfer` (call c-9) was sent and did not answer in time" in unknown_notice(outcomes)
    assert "outcome of this call is unknown" in str(given) and "timed out" in str(given)
    assert Answer(key=KEY, text="done") in outcomes
    assert effects == [9]
    call = store.get_tool_call(KEY, "c-9")
    assert call is not None and call.status is ToolCallStatus.STARTED


async def test_a_call_whose_client_timed_out_is_of_unknown_outcome(
    store: Store, service: KeyedService
) -> None:
    """The service applied the charge and answered after the client gave up: the tool's
    `TimeoutError` is no answer, not a failure ("ran and failed", which the SDK words as
    "Please try again")."""
    service.late = [LATE]
    outcomes, given = await charged(store, charging(service))
    assert "`charge` (call c-9) was sent and did not answer in time" in unknown_notice(outcomes)
    assert "outcome of this call is unknown" in str(given) and "try again" not in str(given)
    assert len(service.requests) == 1 and len(service.effects) == 1  # not sent again
    call = store.get_tool_call(KEY, "c-9")
    assert call is not None and call.status is ToolCallStatus.STARTED


async def test_a_keyed_call_that_timed_out_is_sent_again_with_its_key(
    store: Store, service: KeyedService
) -> None:
    service.late = [LATE]
    outcomes, given = await charged(store, idempotent(charging(service)))
    assert given == "charged: effect-1"  # the first request's effect, answered to the second
    assert [o for o in outcomes if isinstance(o, Notice)] == []
    assert len(service.requests) == 2 and len(service.effects) == 1
    assert len(set(service.keys())) == 1
    call = store.get_tool_call(KEY, "c-9")
    assert call is not None and call.status is ToolCallStatus.COMPLETED and call.attempts == 2


async def test_a_keyed_call_that_never_answers_stops_at_its_attempts(
    store: Store, service: KeyedService
) -> None:
    service.late = [LATE, LATE]
    outcomes, given = await charged(store, idempotent(charging(service)), attempts=2)
    assert "`charge` (call c-9) was sent and did not answer in time" in unknown_notice(outcomes)
    assert "outcome of this call is unknown" in str(given)
    assert len(service.requests) == 2 and len(service.effects) == 1
    call = store.get_tool_call(KEY, "c-9")
    assert call is not None and call.status is ToolCallStatus.STARTED and call.attempts == 2


def test_what_counts_as_no_answer() -> None:
    """By type, by the names libraries give their timeouts and dropped connections, and by
    what an error was raised from; an error the service answered is an answer."""

    class ReadTimeout(OSError):  # as requests and httpx name theirs
        pass

    class ServerDisconnectedError(Exception):  # aiohttp's
        pass

    class PaymentError(Exception):
        pass

    def raised_from(cause: BaseException) -> PaymentError:
        try:
            raise PaymentError("the payment service did not answer") from cause
        except PaymentError as exc:
            return exc

    assert no_answer(TimeoutError()) is NoAnswer.TIMED_OUT
    assert no_answer(ReadTimeout()) is NoAnswer.TIMED_OUT
    assert no_answer(ConnectionResetError()) is NoAnswer.CONNECTION_LOST
    assert no_answer(ServerDisconnectedError()) is NoAnswer.CONNECTION_LOST
    assert no_answer(raised_from(TimeoutError())) is NoAnswer.TIMED_OUT
    assert no_answer(ExceptionGroup("tasks", [ValueError(), TimeoutError()])) is (
        NoAnswer.TIMED_OUT
    )
    assert no_answer(PaymentError("card declined")) is None
    assert no_answer(ValueError("bad amount")) is None
