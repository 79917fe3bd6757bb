"""A tool call that failed without an answer: it timed out, or its connection was lost while
it was in flight. An error that the tool or its service answered is a known outcome (it ran
and failed); no answer says nothing of whether the call took effect. So the guard (`guard`)
leaves such a call `started`, of unknown outcome, and never sends it again, unless it is
keyed (`idempotent`: then it is sent again with its key) or retry-safe (then it is the SDK's
error, as for any failure).

Where the failure is seen: an MCP server's wrapper (`mcp_servers`, which knows its client's
error codes), the tool's own failure formatter (the SDK turns a function tool's exception
into an error output inside the tool, `noting_failures`), or the guard itself (a tool whose
exception reaches it; a guarded tool's own `timeout_seconds`, which the guard applies)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

import anyio
from agents import FunctionTool, RunContextWrapper
from agents.tool import (
    maybe_invoke_function_tool_failure_error_function,
    set_function_tool_failure_error_function,
)

ToolT = TypeVar("ToolT")
# Names that libraries give their timeouts and dropped connections (httpx's `ReadTimeout`
# and `RemoteProtocolError`, requests' `ReadTimeout` and `ConnectionError`, botocore's
# `ReadTimeoutError` and `EndpointConnectionError`, aiohttp's `ServerDisconnectedError`,
# openai's `APITimeoutError`...), most of which derive from no built-in exception.
TIMEOUT_NAMES = ("Timeout",)
CONNECTION_NAMES = (
    "ConnectionError",
    "ConnectError",
    "ConnectionClosed",
    "Disconnected",
    "NetworkError",
    "RemoteProtocolError",
)


class NoAnswer(StrEnum):
    """Why a call that was sent got no answer."""

    TIMED_OUT = "timed_out"
    CONNECTION_LOST = "connection_lost"


@dataclass
class CallWatch:
    """What became of one tool call the guard runs."""

    not_sent: bool = False  # its MCP server was down: nothing was sent
    no_answer: NoAnswer | None = None  # sent, and no answer came

    def saw(self, exc: BaseException) -> None:
        if self.no_answer is None:
            self.no_answer = no_answer(exc)


CURRENT_CALL: ContextVar[CallWatch | None] = ContextVar("bot_tool_call", default=None)


def no_answer(exc: BaseException) -> NoAnswer | None:
    """Why the failure `exc` (or an exception it was raised from) means that no answer came,
    or None: the failure is an answer (the call ran and failed)."""
    for error in _causes(exc):
        names = [kind.__name__ for kind in type(error).__mro__]
        if isinstance(error, TimeoutError) or any(
            part in name for name in names for part in TIMEOUT_NAMES
        ):
            return NoAnswer.TIMED_OUT
        lost = (
            ConnectionError,
            anyio.ClosedResourceError,
            anyio.BrokenResourceError,
            anyio.EndOfStream,
        )
        if isinstance(error, lost) or any(
            part in name for name in names for part in CONNECTION_NAMES
        ):
            return NoAnswer.CONNECTION_LOST
    return None


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what it was raised from (`raise ... from`), and the members of a group."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        error = pending.pop(0)
        if id(error) in seen:
            continue
        seen.add(id(error))
        yield error
        if isinstance(error, BaseExceptionGroup):
            pending += list(error.exceptions)
        if error.__cause__ is not None:
            pending.append(error.__cause__)


def unanswered_output(why: NoAnswer, server: str | None) -> str:
    """What the model is told of a call that got no answer."""
    if why is NoAnswer.TIMED_OUT:
        happened = "it was sent, and no answer came in time (it timed out)"
    elif server is not None:
        happened = "it was sent to its MCP server, whose connection failed before it answered"
    else:
        happened = "it was sent, and its connection failed before it answered"
    return (
        f"The outcome of this call is unknown: {happened}. It was not run again. Tell the "
        "user, and do not assume it succeeded."
    )


def noting_failures(tool: ToolT) -> ToolT:
    """The tool to invoke for a guarded function tool: a copy whose failure formatter first
    notes the exception on the call's watch, then formats it as the tool's own would (the
    SDK turns the exception into an error output inside the tool, so the guard would see
    only the text). Other tools are returned as they are: their exceptions reach the guard."""
    if not isinstance(tool, FunctionTool):
        return tool
    original = tool
    noted = copy.copy(tool)  # its invoker is bound to the copy, and formats with the copy's

    async def formatted(ctx: RunContextWrapper[Any], error: Exception) -> str:
        watch = CURRENT_CALL.get()
        if watch is not None:
            watch.saw(error)
        text = await maybe_invoke_function_tool_failure_error_function(
            function_tool=original, context=ctx, error=error
        )
        if text is None:  # the tool's own policy: the exception goes on
            raise error
        return text

    set_function_tool_failure_error_function(noted, formatted)
    return noted
