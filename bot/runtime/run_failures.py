"""What the thread is told when a run fails: a plain reason (details go to the log, under
the notice's reference), and what to do, which depends on whether trying again can help: a
timeout or a model service that failed may answer next time; a refusal of the request
itself (HTTP 400) will not."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from agents.exceptions import MaxTurnsExceeded

from bot.runtime.model_access import model_access_reason
from bot.runtime.outcomes import Notice, NoticeKind, new_reference
from bot.runtime.pass_results import Settled
from bot.runtime.window_refusals import is_permanent_refusal
from storage import Status

if TYPE_CHECKING:
    from bot.runtime.serving_view import ServingView

log = logging.getLogger("bot.runtime.driver")  # a run's lines, under one name


def plain_reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "a step took too long"
    if isinstance(exc, MaxTurnsExceeded):
        return "it took more steps than allowed"
    if is_permanent_refusal(exc):
        return "the model service refused the request"
    return model_access_reason(exc) or "the model service failed"


def what_to_do(exc: BaseException) -> str:
    """A refusal of the request itself comes again however often it is sent: trying again
    is no advice then."""
    if is_permanent_refusal(exc):
        return (
            "Nothing was lost, but trying again would be refused the same way: an admin can "
            "look into it with the reference below, or start a new thread to go on."
        )
    return "Nothing was lost; send a message or use /resume to try again."


async def interrupted(serving: ServingView, exc: BaseException) -> Settled:
    """The run failed (model or API error, too many turns, a turn that took too long). The
    last checkpoint stays; a new message or `/resume` continues from it. Messages not yet
    consumed stay queued."""
    reference = new_reference()
    log.error("%s [%s]: run failed", serving.key, reference, exc_info=exc)
    await serving.emit_now(
        Notice(
            key=serving.key,
            kind=NoticeKind.RUN_FAILED,
            text=f"The run stopped: {plain_reason(exc)}. {what_to_do(exc)}",
            reference=reference,
        )
    )
    return Settled(Status.INTERRUPTED)
