"""`/metrics` says when the embedded store's quick calls have left the event loop (a slow
disk, `storage.local.loop_time`): the gauge reads the store when scraped."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest

from bot import metrics
from storage.local import LocalStore


def scraped() -> str:
    return generate_latest(metrics.REGISTRY).decode()


def test_the_gauge_follows_the_stores_loop_time(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    try:
        metrics.watch_storage(store)
        assert "bot_storage_calls_off_loop 0.0" in scraped()
        for _ in range(15):
            store.loop_time.took(0.050)  # fsyncs of a slow disk
        assert "bot_storage_calls_off_loop 1.0" in scraped()
    finally:
        store.close()
