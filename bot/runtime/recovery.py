"""Recovery: resume the conversations whose holder died, each once across replicas.

A holder is dead when its lease expired, when it is a process of this host that no longer
runs (`holder.provably_dead`), or when its replica stopped beating (`storage.replicas`:
another host's replica is taken over a few seconds after it died, not a lease later). The
taker bumps the fence, so the silent holder's late writes are refused. Threads with no
holder (waiting for a slot, or given up by a shutdown) wait for a slot here like any other
(`slots`), in the order the index lists them: least recently active first."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from bot import metrics
from bot.runtime.lease_owner import new_owner, provably_dead
from bot.runtime.outcomes import Outcome
from bot.runtime.progress import shown
from bot.runtime.scheduler import Scheduler
from storage import Conversation, LeaseBusy, LeaseLost, NotFound, Status
from storage.replicas import silent

log = logging.getLogger(__name__)
SILENCE = timedelta(seconds=4)  # a replica whose last beat is older is taken for dead


async def recover_conversations(scheduler: Scheduler, *, limit: int) -> list[Outcome]:
    """Resume conversations whose holder died (status `running`, lease expired, absent,
    held by a process on this host that no longer runs, or by a replica that stopped
    beating), each once across replicas, with bounded concurrency; failed deliveries wait
    for their backoff."""
    parts = scheduler.parts
    if parts.draining:
        return []
    running = await parts.storage_calls(parts.store.list_by_status, Status.RUNNING, limit=limit)
    now = parts.store.clock()
    cutoff = parts.store.takeover_cutoff(now)
    gate = asyncio.Semaphore(parts.settings.recovery_concurrency)
    held = any(r.lease_expires_at and r.lease_expires_at >= cutoff for r in running)
    beats = (
        await parts.storage_calls(parts.store.beats) if held else {}
    )  # one read, for every thread held
    # Silence over a time this replica could not beat either (a storage stall) proves
    # nothing: counted as the heartbeat counts it (`heartbeat.silent_before`).
    quiet_since = min(now - SILENCE, parts.silent_before or now)

    async def recover_one(record: Conversation) -> list[Outcome]:
        if record.delivery_retry_at is not None and record.delivery_retry_at > now:
            return []
        dead: str | None = None
        why = ""
        if record.lease_owner and record.lease_expires_at and record.lease_expires_at >= cutoff:
            if provably_dead(record.lease_owner):
                why = "its process is gone"
            elif silent(record.lease_owner, beats, quiet_since):
                why = "its replica stopped beating"
            else:
                return []  # a live holder serves it
            dead = record.lease_owner
        key, person = record.key, record.run_by
        if parts.slots.waits(key):
            return []  # it waits for a slot here already
        slot = parts.slots.try_take(person)
        if slot is None:
            await shown(lambda: parts.progress.queued(key, person))
            slot = await parts.slots.take(key, person)
            if slot is None:
                return []
        with slot:
            async with gate:
                if parts.draining:
                    return []
                try:
                    lease, fresh = await parts.storage_calls(
                        parts.store.acquire,
                        key,
                        new_owner(parts.process),
                        create=False,
                        takeover_from=dead,
                    )
                except (LeaseBusy, NotFound):
                    return []  # another replica has it, or it is gone
                if fresh.status is not Status.RUNNING:
                    # Finished meanwhile by another replica (which may take it again before
                    # this lets go, once this lease has run out: then it is theirs anyway).
                    with contextlib.suppress(LeaseLost):
                        await parts.storage_calls(parts.store.release, lease, touch=False)
                    return []
                if dead:
                    try:
                        # Taking a dead holder's run over is activity, as its working
                        # renewals were: nobody renewed the state since it died, and the
                        # keeper's first renewal comes a third of a lease from now, maybe
                        # past its expiry (aws seed 630083, a 5 s TTL: the resumed run's
                        # answer was lost with it). Not a thread left unheld: a delivery
                        # retried is no activity (`BOT_STATE_TTL`).
                        lease = await parts.storage_calls(parts.store.renew, lease, working=True)
                    except LeaseLost:
                        return []  # expired meanwhile: the thread's next event tells it
                    log.info("%s: took over from %s (%s)", key, dead, why)
                    metrics.TAKEOVERS.labels(why.split()[1]).inc()
                unheld = record.lease_owner is None
                served = await scheduler.serve_under_lease(
                    lease, fresh, recovering=True, unheld=unheld
                )
        outcomes = served.outcomes
        if served.yielded:
            outcomes += await scheduler.serve_when_admitted(key, person)
        return outcomes

    results = await asyncio.gather(*(recover_one(r) for r in running))
    return [outcome for outcomes in results for outcome in outcomes]
