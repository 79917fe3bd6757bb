"""A guardrail that stopped a request: the turn ends with a plain answer naming it, recorded
as finished (not a failure: nothing is retried, `/resume` has nothing to continue). What it
says of the request's tool calls is what the ledger says: a check can trip after a call
ran (an output guardrail looks at the final answer, long after an approved call), so "I
did not act on it" is said only when no call of the request ran or may have."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agents.exceptions import (
    InputGuardrailTripwireTriggered,
    OutputGuardrailTripwireTriggered,
    ToolInputGuardrailTripwireTriggered,
    ToolOutputGuardrailTripwireTriggered,
)

from bot.runtime import state_checks
from bot.runtime.envelope import Envelope, HeldMessage
from bot.runtime.open_calls import ClosedCalls
from bot.runtime.outcomes import Notice, NoticeKind
from bot.runtime.pass_results import Settled
from storage import LeaseLost, Status, ToolCallStatus

if TYPE_CHECKING:
    from bot.runtime.serving_view import ServingView

log = logging.getLogger("bot.runtime.driver")  # a run's lines, under one name
NOT_RUN_GUARDED = "Not run: a check stopped the request before this call started."


def guardrail_name(exc: BaseException) -> str | None:
    """The name of the guardrail whose tripwire ended the turn, if one did."""
    if isinstance(exc, InputGuardrailTripwireTriggered | OutputGuardrailTripwireTriggered):
        return exc.guardrail_result.guardrail.get_name()
    if isinstance(exc, ToolInputGuardrailTripwireTriggered | ToolOutputGuardrailTripwireTriggered):
        return exc.guardrail.get_name()
    return None


def _stopped(exc: BaseException, name: str) -> str:
    """What the check stopped."""
    if isinstance(exc, OutputGuardrailTripwireTriggered):
        return f"A check (`{name}`) withheld my answer to this request"
    if isinstance(exc, ToolInputGuardrailTripwireTriggered):
        return f"A check (`{name}`) stopped a tool call of this request before it ran"
    if isinstance(exc, ToolOutputGuardrailTripwireTriggered):
        return f"A check (`{name}`) stopped this request at a tool's result"
    return f"A check (`{name}`) stopped this request"


@dataclass(frozen=True)
class EndedRequest:
    """A request that a check (or its size: `too_large`) ended: who started it, messages
    held for its run (answered next), the inbox entries given to it, and whether its run
    was `resumed` from a checkpoint (then its history holds its earlier turns' calls)."""

    started_by: str
    held: list[HeldMessage]
    consume: list[str]
    resumed: bool

    async def finish(
        self,
        serving: ServingView,
        notice: Notice,
        closed: ClosedCalls,
        disarmed: frozenset[str] = frozenset(),
    ) -> Settled:
        """Record the request as finished with `notice` and the outputs that close its
        open calls; the thread is left idle, its held messages answered next."""
        finished = Envelope(
            run_state={},
            started_by=self.started_by,
            held=self.held,
            finished=True,
            decided=serving.decided,
        )
        await serving.commit(finished, consume=self.consume, outcomes=[notice], items=closed.items)
        return Settled(Status.IDLE, reread=bool(self.held), disarmed=disarmed)


async def guardrail_tripped(
    serving: ServingView, exc: BaseException, ended: EndedRequest
) -> Settled:
    """A guardrail stopped the request: the turn ends with a plain answer naming it, and is
    recorded as finished (not a failure: nothing is retried, `/resume` has nothing to
    continue). The turn's items are not kept; calls left open are closed as the ledger
    says, so that the history stays valid; messages held for the run are answered next.
    The notice says which calls of the request ran (those of its earlier turns too, when
    the run was `resumed` from a checkpoint: its history holds them), which did not, and
    leaves decided approval requests showing who decided."""
    name = guardrail_name(exc) or "?"
    log.info("%s: guardrail %r stopped the request", serving.key, name)
    disarmed = await _not_started(serving)
    closed = await state_checks.close_calls(serving, answered=ended.resumed)
    said = _stopped(exc, name)
    if closed.acted:
        text = f"{said}; what was done before it stands. {closed.describe()}"
    elif isinstance(exc, InputGuardrailTripwireTriggered):
        text = f"{said}, so I did not act on it."
    else:
        text = f"{said}. Nothing was done."
    if closed.all and not closed.acted:
        text += f" {closed.describe()}"
    notice = Notice(key=serving.key, kind=NoticeKind.GUARDRAIL, text=text, settles=closed.undecided)
    return await ended.finish(serving, notice, closed, disarmed)


async def _not_started(serving: ServingView) -> frozenset[str]:
    """Calls approved (or claimed) and never started (a tool input guardrail stopped an
    approved call before it ran): the ledger says they did not run, not "outcome unknown".
    A result recorded after the lease was taken (the call's fence still holds it) is the
    truth as well. Returns them: settled here, they are no longer the serve's to run."""
    armed = serving.armed.snapshot()
    for call_id in sorted(armed):
        with contextlib.suppress(LeaseLost):  # approved, not started: its new holder's
            await serving.storage_calls(
                serving.store.complete_tool_call,
                serving.lease,
                call_id,
                NOT_RUN_GUARDED,
                status=ToolCallStatus.CANCELLED,
            )
    return armed
