"""How a tool author marks a tool (or an MCP server's tools) for the guard (`guard`): harmless
to run again (`retry_safe`), or keyed, deduplicated by the service it calls (`idempotent`).
A mark is an attribute on the tool (or server) itself."""

from __future__ import annotations

from typing import TypeVar

RETRY_SAFE = "_bot_retry_safe"
RETRY_SAFE_TOOLS = "_bot_retry_safe_tools"  # on an MCP server: those of its tools
IDEMPOTENT = "_bot_idempotent"
IDEMPOTENT_TOOLS = "_bot_idempotent_tools"  # on an MCP server: those of its tools
KEY_ARGUMENT = "_bot_key_argument"  # the argument a keyed tool receives its key in
MCP_SERVER = "_bot_mcp_server"  # on a listed MCP tool: the server it runs on
T = TypeVar("T")


def retry_safe(tool: T, *tool_names: str) -> T:
    """Declare a tool harmless to run again (read-only, or idempotent by itself): it may run
    again after a crash and needs no pre-call pause. Any kind of tool, or an MCP server: all
    its tools, or only those named (`retry_safe(server, "search", "lookup")`)."""
    if tool_names:
        setattr(tool, RETRY_SAFE_TOOLS, frozenset(tool_names))
    else:
        setattr(tool, RETRY_SAFE, True)
    return tool


def is_retry_safe(tool: object) -> bool:
    return bool(getattr(tool, RETRY_SAFE, False))


def idempotent(tool: T, *tool_names: str, key_argument: str | None = None) -> T:
    """Declare a side-effecting tool keyed: the service it calls deduplicates by the call's
    idempotency key (`RequestContext.idempotency_key(ctx.tool_call_id)`), so a call whose
    outcome is unknown after a crash, or that got no answer (a timeout, a lost connection),
    is run again with the same key (`BOT_IDEMPOTENT_ATTEMPTS` in all) and ends done or
    failed, not unknown. It still pauses before it runs and is
    approved once. For an MCP server: all its tools, or those named; `key_argument` names
    the argument the key is passed in (the tool's own schema must accept it)."""
    if tool_names:
        setattr(tool, IDEMPOTENT_TOOLS, frozenset(tool_names))
    else:
        setattr(tool, IDEMPOTENT, True)
    if key_argument:
        setattr(tool, KEY_ARGUMENT, key_argument)
    return tool


def is_idempotent(tool: object) -> bool:
    return bool(getattr(tool, IDEMPOTENT, False))


def server_says_retry_safe(server: object, tool_name: str) -> bool:
    names = getattr(server, RETRY_SAFE_TOOLS, None)
    return is_retry_safe(server) or (names is not None and tool_name in names)


def server_says_idempotent(server: object, tool_name: str) -> bool:
    names = getattr(server, IDEMPOTENT_TOOLS, None)
    return is_idempotent(server) or (names is not None and tool_name in names)
