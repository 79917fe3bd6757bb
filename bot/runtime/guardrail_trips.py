"""A guardrail that stopped a request: the turn ends with a plain answer naming it, recorded
as finished (not a failure: nothing is retried, `/resume` has nothing to continue)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agents.exceptions import (
    InputGuardrailTripwireTriggered,
    OutputGuardrailTripwireTriggered,
    ToolInputGuardrailTripwireTriggered,
    ToolOutputGuardrailTripwireTriggered,
)

from bot.runtime import state_checks
from bot.runtime.envelope import Envelope, HeldMessage
from bot.runtime.outcomes import Notice, NoticeKind
from storage import Status

if TYPE_CHECKING:
    from bot.runtime.serving_view import ServingView

log = logging.getLogger("bot.runtime.driver")  # these were the driver's own lines


def guardrail_name(exc: BaseException) -> str | None:
    """The name of the guardrail whose tripwire ended the turn, if one did."""
    if isinstance(exc, InputGuardrailTripwireTriggered | OutputGuardrailTripwireTriggered):
        return exc.guardrail_result.guardrail.get_name()
    if isinstance(exc, ToolInputGuardrailTripwireTriggered | ToolOutputGuardrailTripwireTriggered):
        return exc.guardrail.get_name()
    return None


async def guardrail_tripped(
    serving: ServingView, name: str, started_by: str, held: list[HeldMessage], consume: list[str]
) -> None:
    """A guardrail stopped the request: the turn ends with a plain answer naming it, and is
    recorded as finished (not a failure: nothing is retried, `/resume` has nothing to
    continue). The turn's items are not kept; calls left open are closed as the ledger
    says, so that the history stays valid; messages held for the run are answered next."""
    log.info("%s: guardrail %r stopped the request", serving.key, name)
    closed = await state_checks.close_calls(serving)
    notice = Notice(
        key=serving.key,
        kind=NoticeKind.GUARDRAIL,
        text=f"A check (`{name}`) stopped this request, so I did not act on it."
        + (f" {closed.describe()}" if closed.all else ""),
        settles=closed.all,
    )
    finished = Envelope(
        run_state={}, started_by=started_by, held=held, finished=True, decided=serving.decided
    )
    await serving.commit(finished, consume=consume, outcomes=[notice], items=closed.items)
    serving.release_as(Status.IDLE)
    serving.look_again(bool(held))
