"""Open the configured backend."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from storage.base import Store
from storage.config import StorageSettings


def store_options(settings: StorageSettings) -> dict[str, Any]:
    return {
        "lease_duration": timedelta(seconds=settings.lease_seconds),
        "lease_skew": timedelta(seconds=settings.lease_skew_seconds),
        "state_ttl": settings.state_ttl,
        "tombstone_ttl": settings.tombstone_ttl,
        "backlog_limit": settings.backlog_limit,
        "event_ttl": settings.event_ttl,
        "claim_ttl": settings.claim_ttl,
        "status_shards": settings.status_shards,
    }


def open_store(settings: StorageSettings | None = None) -> Store:
    settings = settings or StorageSettings()
    if settings.backend == "aws":
        from storage.aws import AwsStore

        assert settings.table and settings.bucket  # checked by StorageSettings
        return AwsStore(settings.table, settings.bucket, **store_options(settings))
    from storage.local import LocalStore

    return LocalStore(settings.data_dir, **store_options(settings))
