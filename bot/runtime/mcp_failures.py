"""How an MCP server fails, as the runtime tells it apart: a server that is down before
anything was sent (`McpServerDown`), a connection lost while a call was in flight, a call
that got no answer within the client's read timeout (`timed_out`: the server is not down,
but the call may have happened), and an error that the server itself answered (its
connection works)."""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar

import anyio
from agents.exceptions import AgentsException, UserError

CONNECTION_CLOSED = -32000  # the MCP client's error code for a connection that is gone
REQUEST_TIMEOUT = -32001  # the MCP client's: no answer within its read timeout
UNAVAILABLE_TRANSPORT = ("Connection lost", "Connection timeout", "HTTP error", "not initialized")


class McpServerDown(AgentsException):
    """A run needs MCP servers that are not connected; nothing was sent to them. An Agents
    SDK exception, so that the SDK passes it on as it is (out of a tool, too)."""

    def __init__(self, servers: Iterable[str]) -> None:
        self.servers = sorted(set(servers))
        names = ", ".join(f"`{name}`" for name in self.servers)
        super().__init__(f"the {names} tools were unavailable, so nothing was sent to them")


# Servers found down during the turn being driven: a nested agent's failure to list its
# tools becomes an error output inside the SDK, and the runtime must still pause.
SEEN_DOWN: ContextVar[set[str] | None] = ContextVar("bot_mcp_seen_down", default=None)


def connection_lost(exc: BaseException) -> bool:
    """The error says the server's connection is gone (not that a tool failed)."""
    code = getattr(getattr(exc, "error", None), "code", None)
    if code == CONNECTION_CLOSED:
        return True
    if isinstance(exc, UserError):
        return any(part in str(exc) for part in UNAVAILABLE_TRANSPORT)
    if isinstance(exc, TimeoutError):  # a slow answer is not a lost connection
        return False
    return isinstance(
        exc,
        anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream | OSError,
    )


def timed_out(exc: BaseException) -> bool:
    """The request got no answer in time (the client gave up waiting; it was sent)."""
    code = getattr(getattr(exc, "error", None), "code", None)
    return code == REQUEST_TIMEOUT or isinstance(exc, TimeoutError)


def answered(exc: BaseException) -> bool:
    """An error the server itself sent back (so its connection works)."""
    code = getattr(getattr(exc, "error", None), "code", None)
    return isinstance(code, int) and code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT)


def plain(exc: BaseException | None) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # what went wrong inside
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if exc is not None else ""
