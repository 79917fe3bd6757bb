"""Keyed calls (`idempotent`): the service a keyed tool calls applies each idempotency key
once, so a call whose outcome is unknown is sent again with its key rather than reported
unknown: after a crash or a lost lease (`start_again`, when the run goes on), or when it got
no answer (`send_again`, at once). Its attempts are counted in the ledger, all causes
together (`BOT_IDEMPOTENT_ATTEMPTS`)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from agents.tool_context import ToolContext

from bot.runtime.tool_failures import NoAnswer
from bot.runtime.turn_scope import TurnScope
from storage import StorageError, ToolCallRecord

log = logging.getLogger("bot.runtime.guard")


async def send_again(scope: TurnScope, call_id: str, tool: str, why: NoAnswer) -> bool:
    """A keyed call that got no answer is sent again with its key (the service applies it
    once), while its attempts last (`BOT_IDEMPOTENT_ATTEMPTS`, counted in the ledger with
    those after a crash). False when they are spent: its outcome stays unknown."""
    try:
        again = await scope.storage(
            scope.store.retry_tool_call, scope.lease, call_id, max_attempts=scope.keyed_attempts
        )
    except StorageError as fault:
        scope.fault = fault
        raise
    if again is None:
        return False
    log.info("%s: `%s` (call %s) sent again with its key (%s)", scope.lease.key, tool, call_id, why)
    await asyncio.sleep(backoff(again.attempts))
    return True


async def start_again(
    scope: TurnScope, call_id: str, tool: str, started: ToolCallRecord
) -> ToolCallRecord | None:
    """A keyed call whose outcome is unknown (its process died, or its lease was lost,
    while it ran) is started again, with the same key, while its attempts last: the service
    applies the key once. A pause before each attempt after the second lets a service that
    failed recover. None when it was started again; else the ledger's record, read again:
    its attempts are spent (outcome unknown, as for any call), or the serve it was taken
    from recorded its result meanwhile (completed: that result is the call's)."""
    try:
        again = await scope.storage(
            scope.store.retry_tool_call, scope.lease, call_id, max_attempts=scope.keyed_attempts
        )
        if again is None:
            now = await scope.storage(
                scope.store.get_tool_call, scope.lease.key, call_id, scope.lease.generation
            )
            return now or started
    except StorageError as fault:
        scope.fault = fault
        raise
    await asyncio.sleep(backoff(again.attempts))
    scope.started_again.append((call_id, tool))
    return None


def backoff(attempt: int) -> float:
    """Seconds before attempt `attempt` of a keyed call (the second goes at once)."""
    return 0.0 if attempt <= 2 else min(2.0 ** (attempt - 3), 10.0)


def with_key(arguments: str, name: str, ctx: ToolContext[Any]) -> str:
    """A keyed MCP tool's arguments with its key in the argument `name` (over anything the
    model put there)."""
    key = getattr(ctx.context, "idempotency_key", None)
    if not callable(key):
        return arguments
    try:
        document = json.loads(arguments or "{}")
    except ValueError:
        return arguments
    if not isinstance(document, dict):
        return arguments
    document[name] = key(ctx.tool_call_id)
    return json.dumps(document, ensure_ascii=False)
