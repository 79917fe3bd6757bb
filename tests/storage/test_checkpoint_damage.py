"""A checkpoint blob that is truncated, corrupted or missing is a typed error, never a crash
and never a silently empty state."""

from __future__ import annotations

import gzip

import pytest

from storage import (
    CheckpointCorrupt,
    CheckpointError,
    CheckpointMeta,
    CheckpointMissing,
    CheckpointPointer,
    CheckpointTruncated,
    Store,
)
from testkit.pointers import checkpoint_pointer
from testkit.storage_faults import overwrite_blob, stored_blob
from tests.storage.conftest import KEY

STATE = {"$schemaVersion": "1.21", "turns": ["x" * 50 for _ in range(200)]}


def _committed(store: Store) -> CheckpointPointer:
    lease, _ = store.acquire(KEY, "a")
    done = store.commit(
        lease,
        state=STATE,
        meta=CheckpointMeta(schema_version="1.21", agent_fingerprint="f"),
        expected_version=0,
    )
    assert done.checkpoint is not None
    return done.checkpoint


def test_intact_checkpoint_loads(store: Store) -> None:
    assert store.load_checkpoint(_committed(store)) == STATE


def test_truncated_blob(store: Store) -> None:
    pointer = _committed(store)
    stored = stored_blob(store, pointer.object_key)
    overwrite_blob(store, pointer.object_key, stored[: pointer.size // 2])
    with pytest.raises(CheckpointTruncated):
        store.load_checkpoint(pointer)


def test_corrupted_blob_same_size(store: Store) -> None:
    pointer = _committed(store)
    data = bytearray(stored_blob(store, pointer.object_key))
    data[len(data) // 2] ^= 0xFF
    overwrite_blob(store, pointer.object_key, bytes(data))
    with pytest.raises(CheckpointCorrupt, match="sha256"):
        store.load_checkpoint(pointer)


def test_replaced_blob_with_valid_gzip_of_other_state(store: Store) -> None:
    pointer = _committed(store)
    overwrite_blob(store, pointer.object_key, gzip.compress(b'{"other":1}' * 10_000))
    with pytest.raises(CheckpointError):
        store.load_checkpoint(pointer)


def test_missing_blob(store: Store) -> None:
    pointer = _committed(store)
    overwrite_blob(store, pointer.object_key, None)
    with pytest.raises(CheckpointMissing):
        store.load_checkpoint(pointer)


def test_pointer_with_matching_hash_but_not_gzip_is_corrupt(store: Store) -> None:
    lease, _ = store.acquire(KEY, "a")
    junk = b"not gzip at all"
    overwrite_blob(store, "checkpoints/junk.json.gz", junk)
    pointer = checkpoint_pointer("checkpoints/junk.json.gz", data=junk, created_at=lease.expires_at)
    with pytest.raises(CheckpointCorrupt, match="unreadable"):
        store.load_checkpoint(pointer)
