"""Recovery: resume the conversations whose holder died, each once across replicas."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from bot.runtime.holder import new_owner, provably_dead
from bot.runtime.outcomes import Outcome
from bot.runtime.serving import Serving
from storage import Conversation, LeaseBusy, NotFound, Status

if TYPE_CHECKING:
    from bot.runtime.runtime import ConversationRuntime

log = logging.getLogger(__name__)


async def recover_conversations(rt: ConversationRuntime, *, limit: int) -> list[Outcome]:
    """Resume conversations whose holder died (status `running`, lease expired, absent,
    or held by a process on this host that no longer runs), each once across replicas,
    with bounded concurrency; failed deliveries wait for their backoff."""
    if rt.draining:
        return []
    running = await rt.io(rt.store.list_by_status, Status.RUNNING, limit=limit)
    now = rt.store.clock()
    cutoff = rt.store.takeover_cutoff(now)
    gate = asyncio.Semaphore(rt.settings.recovery_concurrency)

    async def recover_one(record: Conversation) -> list[Outcome]:
        if record.delivery_retry_at is not None and record.delivery_retry_at > now:
            return []
        dead: str | None = None
        if record.lease_owner and record.lease_expires_at and record.lease_expires_at >= cutoff:
            if not provably_dead(record.lease_owner):
                return []  # a live holder serves it
            dead = record.lease_owner
        async with gate:
            if rt.draining:
                return []
            try:
                lease, fresh = await rt.io(
                    rt.store.acquire,
                    record.key,
                    new_owner(rt.process),
                    create=False,
                    takeover_from=dead,
                )
            except (LeaseBusy, NotFound):
                return []  # another replica has it, or it is gone
            if fresh.status is not Status.RUNNING:
                await rt.io(rt.store.release, lease, touch=False)
                return []  # finished meanwhile by another replica
            if dead:
                log.info("%s: took over from %s (its process is gone)", record.key, dead)
            return await rt._serve(Serving(rt, lease, fresh, recovering=True))

    results = await asyncio.gather(*(recover_one(r) for r in running))
    return [outcome for outcomes in results for outcome in outcomes]
