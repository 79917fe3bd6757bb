"""This replica's heartbeat (`storage.replicas`): one small write every `BEAT` seconds, and
one read of every replica's beat. A replica seen silent for the first time (its last beat
older than `recovery.SILENCE`) starts a recovery sweep at once, which takes its threads over
(fenced) instead of waiting for their leases to expire: another host's threads resume a few
seconds after it died."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from bot import metrics
from bot.runtime.recovery import SILENCE

if TYPE_CHECKING:
    from bot.runtime.runtime import ConversationRuntime

log = logging.getLogger(__name__)
BEAT = 1.0  # seconds between beats (SILENCE is four of them)


async def keep_beating(runtime: ConversationRuntime, interval: float = BEAT) -> None:
    """Beat until cancelled (after the drain: a stopping replica's threads are released,
    not taken over)."""
    silent: set[str] = set()  # replicas already swept for
    sweeps: set[asyncio.Task[Any]] = set()
    previous: datetime | None = None  # when this replica's last successful beat began
    while True:
        began = runtime.store.clock()
        try:
            await runtime.storage_calls(runtime.store.beat, runtime.process)
            beats = await runtime.storage_calls(runtime.store.beats)
        except Exception:  # a storage blip: the next beat comes well within SILENCE
            log.warning("heartbeat failed; beating again in %ss", interval, exc_info=True)
            await asyncio.sleep(interval)
            continue
        since = silent_before(began, previous, interval)
        previous = began
        runtime.parts.silent_before = since
        gone = {name for name, at in beats.items() if at < since and name != runtime.process}
        if gone - silent and not runtime.draining:
            news = sorted(gone - silent)
            log.info("replicas stopped beating: %s; taking their threads over", news)
            task = asyncio.create_task(_sweep(runtime))
            sweeps.add(task)
            task.add_done_callback(sweeps.discard)
        silent = gone
        await asyncio.sleep(interval)


def silent_before(now: datetime, previous: datetime | None, interval: float) -> datetime:
    """A replica whose last beat is older than this is taken for dead. Counted from this
    replica's own previous beat when that is further back than one interval: while storage
    stalled (or this process was paused), no replica could beat, and the others' silence
    over that time says nothing of them (every replica took the others' threads over after
    a storage stall of a few seconds, each thread moving twice)."""
    if previous is None:
        return now - SILENCE
    return min(now, previous + timedelta(seconds=interval)) - SILENCE


async def _sweep(runtime: ConversationRuntime) -> None:
    try:
        outcomes = await runtime.recover()
        if outcomes:
            metrics.RESUMES.labels("takeover").inc(len({o.key for o in outcomes}))
    except Exception:
        log.exception("taking over a silent replica's threads failed")
