"""Work a new process does once, before it reports healthy, so that a burst of messages is
not slower than a quiet moment: the storage pools' threads and connections opened, the
model's response types made ready (and its streamed events validated by the member they
name: `tagged_unions`), and the heap frozen.

- The OpenAI SDK's response types are pydantic models whose validators are built on first
  use (they refer to each other). Built then, inside the first runs, they take a quarter of
  a second of CPU on the event loop, while the same burst's other messages wait to be kept.
- What the imports made (some 220,000 objects) lives as long as the process. Left to the
  garbage collector, every full collection walks all of it: 100-150 ms in which nothing
  else runs, at whatever moment the allocations happen to trigger it (e.g. in the middle
  of a burst). Frozen (`gc.freeze`), it is never walked again."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import logging
import threading
import time
from types import ModuleType

from pydantic import BaseModel

from bot.runtime import tagged_unions
from bot.runtime.queries import PROBE
from storage.calls import URGENT_THREADS, StorageCalls

log = logging.getLogger(__name__)


def complete_models(module: ModuleType) -> int:
    """Build the validators of the pydantic models `module` exports that are not built yet;
    returns how many were built (one that cannot be built yet is left to its first use)."""
    built = 0
    for value in vars(module).values():
        if (
            inspect.isclass(value)
            and issubclass(value, BaseModel)
            and value is not BaseModel
            and not value.__pydantic_complete__
        ):
            built += bool(value.model_rebuild(raise_errors=False))
    return built


async def open_pools(storage_calls: StorageCalls) -> None:
    """One read per keep thread, all at once (each waits for the others first), so that
    every keep thread and its own storage connection exist before the first burst needs
    them. The record read is the health check's, which does not exist."""
    together = threading.Barrier(URGENT_THREADS)

    def read() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            together.wait(timeout=5)
        storage_calls.store.get(PROBE)

    await asyncio.gather(*(storage_calls.urgent(read) for _ in range(URGENT_THREADS)))


def freeze_heap() -> int:
    """Collect what is garbage now, then leave every object alive now out of the garbage
    collector's future walks; returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


async def warm_up(storage_calls: StorageCalls, *, freeze: bool = False) -> None:
    """`freeze` only in a process that serves and does nothing else (not in tests)."""
    import openai.types.responses

    start = time.perf_counter()
    tagged_unions.install()
    built = complete_models(openai.types.responses)
    try:
        await open_pools(storage_calls)
    except Exception:  # /healthz says so; the process serves once storage answers
        log.warning("warm-up: storage unavailable", exc_info=True)
    if freeze:
        freeze_heap()
    log.info(
        "warmed up in %.2fs (%d model types built, %d objects frozen)",
        time.perf_counter() - start,
        built,
        gc.get_freeze_count(),
    )
