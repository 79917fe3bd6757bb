"""At start, set aside the conversations a different agent paused for approval: each one
whose checkpoint was made under another agent fingerprint fails closed now (its thread told
what was not run and why, its approval cards closed), rather than when someone clicks a
card that can no longer do anything.

It runs in the background once the process serves (health is not delayed), and only once
the fingerprint is final: every MCP server listed its tools (`McpServers.all_listed`),
which may be later than the start. The work is bounded: at most `LIMIT` conversations
awaiting approval (least recently active first; the rest fail closed when next served, as
before), `CONCURRENCY` at a time. Each record is read first (the status index does not hold
the checkpoint's fingerprint), and only one made under another agent takes a run slot and
the thread's lease, is checked again under it and is served like any thread: the serve
verifies the checkpoint and fails closed (`state_checks`). So among replicas that start at
once each thread is told once: whoever holds its lease sets it aside, and the others find
it busy, or no longer awaiting approval."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from bot.runtime.lease_owner import new_owner
from bot.runtime.scheduler import Scheduler
from bot.runtime.state_checks import newer_schema
from storage import Conversation, LeaseBusy, LeaseLost, NotFound, Status

log = logging.getLogger(__name__)
LIMIT = 5000
CONCURRENCY = 4
LISTED_CHECK = 1.0  # seconds between looks at `draining` while MCP servers have not listed


def made_by_another(record: Conversation | None, fingerprint: str) -> bool:
    """Awaiting approval from a checkpoint of another agent fingerprint (one of a newer
    run-state schema is left to a replica that reads it: nothing to say here)."""
    if record is None or record.status is not Status.AWAITING_APPROVAL:
        return False
    pointer = record.checkpoint
    return (
        pointer is not None
        and not pointer.finished
        and pointer.agent_fingerprint != fingerprint
        and not newer_schema(pointer.schema_version)
    )


async def set_aside_changed(scheduler: Scheduler, *, limit: int = LIMIT) -> int:
    """Set aside what another agent paused for approval; how many this process did."""
    parts = scheduler.parts
    await parts.mcp.start()
    while not parts.mcp.all_listed() and not parts.draining:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(parts.mcp.until_listed(), LISTED_CHECK)
    if parts.draining:
        return 0
    listed = await parts.storage_calls(
        parts.store.list_by_status, Status.AWAITING_APPROVAL, limit=limit
    )
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(found: Conversation) -> bool:
        async with gate:
            if parts.draining:
                return False
            return await _set_aside(scheduler, found)

    done = sum(await asyncio.gather(*(one(found) for found in listed)))
    if done:
        log.info("set aside %d of %d conversations paused under another agent", done, len(listed))
    return done


async def _set_aside(scheduler: Scheduler, found: Conversation) -> bool:
    parts = scheduler.parts
    key = found.key
    record = await parts.storage_calls(parts.store.get, key)
    if not made_by_another(record, parts.fingerprint) or parts.slots.waits(key):
        return False  # (a thread that waits for a slot here is served, and told, by that)
    assert record is not None
    person = record.run_by
    slot = parts.slots.try_take(person) or await parts.slots.take(key, person)
    if slot is None:  # stopping, or it waits for a slot here now
        return False
    with slot:
        try:
            lease, fresh = await parts.storage_calls(
                parts.store.acquire, key, new_owner(parts.process), create=False
            )
        except (LeaseBusy, NotFound):
            return False  # served elsewhere (which verifies it), or gone
        if not made_by_another(fresh, parts.fingerprint):  # set aside, decided, or answered
            with contextlib.suppress(LeaseLost):
                await parts.storage_calls(parts.store.release, lease, touch=False)
            return False
        served = await scheduler.serve_under_lease(lease, fresh)
    if served.yielded:  # messages came meanwhile and others wait: back in line
        await scheduler.serve_when_admitted(key, person)
    return True
