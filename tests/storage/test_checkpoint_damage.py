"""A checkpoint blob that is truncated, corrupted or missing is a typed error, never a crash
and never a silently empty state."""

from __future__ import annotations

import gzip
import os

import boto3
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
from storage.aws import AwsStore
from storage.local import LocalStore
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


def _overwrite(store: Store, object_key: str, data: bytes | None) -> None:
    """Damage the stored object behind the store's back, as a disk or an operator might."""
    if isinstance(store, LocalStore):
        path = store.blobs.path(object_key)
        if data is None:
            os.unlink(path)
        else:
            path.write_bytes(data)
    else:
        assert isinstance(store, AwsStore)
        s3 = boto3.client("s3")
        if data is None:
            s3.delete_object(Bucket=store.bucket, Key=object_key)
        else:
            s3.put_object(Bucket=store.bucket, Key=object_key, Body=data)


def _stored(store: Store, pointer: CheckpointPointer) -> bytes:
    return store._get_blob(pointer.object_key)


def test_intact_checkpoint_loads(store: Store) -> None:
    assert store.load_checkpoint(_committed(store)) == STATE


def test_truncated_blob(store: Store) -> None:
    pointer = _committed(store)
    _overwrite(store, pointer.object_key, _stored(store, pointer)[: pointer.size // 2])
    with pytest.raises(CheckpointTruncated):
        store.load_checkpoint(pointer)


def test_corrupted_blob_same_size(store: Store) -> None:
    pointer = _committed(store)
    data = bytearray(_stored(store, pointer))
    data[len(data) // 2] ^= 0xFF
    _overwrite(store, pointer.object_key, bytes(data))
    with pytest.raises(CheckpointCorrupt, match="sha256"):
        store.load_checkpoint(pointer)


def test_replaced_blob_with_valid_gzip_of_other_state(store: Store) -> None:
    pointer = _committed(store)
    _overwrite(store, pointer.object_key, gzip.compress(b'{"other":1}' * 10_000))
    with pytest.raises(CheckpointError):
        store.load_checkpoint(pointer)


def test_missing_blob(store: Store) -> None:
    pointer = _committed(store)
    _overwrite(store, pointer.object_key, None)
    with pytest.raises(CheckpointMissing):
        store.load_checkpoint(pointer)


def test_pointer_with_matching_hash_but_not_gzip_is_corrupt(store: Store) -> None:
    import hashlib

    lease, _ = store.acquire(KEY, "a")
    junk = b"not gzip at all"
    store._put_blob("checkpoints/junk.json.gz", junk)
    pointer = CheckpointPointer(
        object_key="checkpoints/junk.json.gz",
        version=1,
        sha256=hashlib.sha256(junk).hexdigest(),
        size=len(junk),
        schema_version="1.21",
        agent_fingerprint="f",
        created_at=lease.expires_at,
        fence=1,
        session_seq=0,
    )
    with pytest.raises(CheckpointCorrupt, match="unreadable"):
        store.load_checkpoint(pointer)
