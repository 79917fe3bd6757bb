"""A request that cannot fit the model's window, even fitted (`fitting.TooLarge`) or after
the model service refused it twice (`window_refusals`): the request ends with a plain
notice saying so and what to do, and is recorded as finished, not failed. Sending it again,
or `/resume`, would meet the same refusal; the thread itself is not stuck: the request's
items are not kept in the history, calls left open are closed as the ledger says, messages
held for the run are answered next, and the next message is fitted afresh."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bot.runtime import state_checks
from bot.runtime.fitting import TooLarge
from bot.runtime.outcomes import Notice, NoticeKind, new_reference
from bot.runtime.pass_results import Settled

if TYPE_CHECKING:
    from bot.runtime.guardrail_trips import EndedRequest
    from bot.runtime.serving_view import ServingView

log = logging.getLogger(__name__)


def why(exc: BaseException) -> str:
    found = exc if isinstance(exc, TooLarge) else None
    cause = exc.__cause__ or exc.__context__
    while found is None and cause is not None:
        found = cause if isinstance(cause, TooLarge) else None
        cause = cause.__cause__ or cause.__context__
    if found is not None and found.room <= 0 and found.needed <= 0:
        return "the model refused it as too large even cut down to half"
    if found is not None and found.room < found.needed // 4:
        return "the agent's instructions and tools alone take up most of the window"
    if found is not None:
        return "this run's own messages and tool results are too much, even cut short"
    return "the model refused it as too large"


async def too_large(serving: ServingView, exc: BaseException, ended: EndedRequest) -> Settled:
    """As a guardrail's trip (`guardrail_trips`): the calls of the request are told as the
    ledger says (those of its earlier turns too, when the run was `resumed` from a
    checkpoint), decided approval requests keep who decided."""
    reference = new_reference()
    log.warning(
        "%s [%s]: the request does not fit the model's window", serving.key, reference, exc_info=exc
    )
    closed = await state_checks.close_calls(serving, answered=ended.resumed)
    text = (
        "I can't answer this request: even with earlier messages summed up or left out and "
        f"long texts cut short, it does not fit the model's context window ({why(exc)}). "
        "Please ask for less at once, or send a shorter message; this thread goes on."
    )
    if closed.acted:
        text += f" What was done before it stands. {closed.describe()}"
    elif closed.all:
        text += f" {closed.describe()}"
    notice = Notice(
        key=serving.key,
        kind=NoticeKind.TOO_LARGE,
        text=text,
        settles=closed.undecided,
        reference=reference,
    )
    return await ended.finish(serving, notice, closed)
