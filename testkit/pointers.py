"""Checkpoint pointers as storage and runtime tests write them by hand: the fields a test does
not care about are given once here."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from storage import CheckpointPointer


def checkpoint_pointer(
    object_key: str, version: int = 1, *, data: bytes | None = None, **fields: Any
) -> CheckpointPointer:
    """A pointer to `object_key`; with `data`, the hash and size are that blob's. `fields`
    set any other (`created_at`, `fence`, `session_seq`, ...)."""
    values: dict[str, Any] = {
        "object_key": object_key,
        "version": version,
        "sha256": "0" * 64 if data is None else hashlib.sha256(data).hexdigest(),
        "size": 1 if data is None else len(data),
        "schema_version": "1.21",
        "agent_fingerprint": "f",
        "created_at": datetime(2025, 1, 1, tzinfo=UTC),
        "fence": 1,
        "session_seq": 0,
    }
    return CheckpointPointer(**(values | fields))
