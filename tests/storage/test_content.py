"""Content-addressed blobs (files people shared), run against both backends: kept once under
their sha256, read back verified, a missing or damaged blob a typed error; the local `gc`
expires them like S3's lifecycle rule, counting from the last time they were kept."""

from __future__ import annotations

import hashlib
import os
import time
from datetime import timedelta

import boto3
import pytest

from storage import ContentMissing, Store
from storage.aws import AwsStore
from storage.content import content_key
from storage.local import LocalStore

PDF = b"%PDF-1.4\n" + os.urandom(2048)


def stored_keys(store: Store) -> list[str]:
    """The objects under the content prefix, behind the store's back."""
    if isinstance(store, LocalStore):
        return sorted(key for key, _ in store.blobs.keys("files"))
    assert isinstance(store, AwsStore)
    listing = boto3.client("s3").list_objects_v2(Bucket=store.bucket, Prefix="files/")
    return sorted(obj["Key"] for obj in listing.get("Contents", []))


def test_bytes_are_kept_once_under_their_digest(store: Store) -> None:
    digest = store.put_content(PDF)
    assert digest == hashlib.sha256(PDF).hexdigest()
    assert store.put_content(PDF) == digest  # the same file shared again
    assert store.get_content(digest) == PDF
    other = store.put_content(b"a text file\n")
    assert stored_keys(store) == sorted([content_key(digest), content_key(other)])


def test_empty_bytes_are_content_too(store: Store) -> None:
    digest = store.put_content(b"")
    assert store.get_content(digest) == b""


def test_missing_and_damaged_content_is_a_typed_error(store: Store) -> None:
    with pytest.raises(ContentMissing):
        store.get_content(hashlib.sha256(b"never kept").hexdigest())
    digest = store.put_content(PDF)
    key = content_key(digest)
    if isinstance(store, LocalStore):
        store.blobs.path(key).write_bytes(PDF[:-1] + b"!")
    else:
        assert isinstance(store, AwsStore)
        boto3.client("s3").put_object(Bucket=store.bucket, Key=key, Body=PDF[:100])
    with pytest.raises(ContentMissing) as damaged:
        store.get_content(digest)
    assert "sha256" in damaged.value.detail
    store.put_content(PDF)  # kept again: whole again
    assert store.get_content(digest) == PDF


@pytest.mark.parametrize("digest", ["../../etc/passwd", "A" * 64, "ab" * 31, ""])
def test_only_digests_name_content(store: Store, digest: str) -> None:
    with pytest.raises(ValueError):
        store.get_content(digest)


def test_local_gc_expires_content_a_day_after_the_state_ttl_from_its_last_keep(
    local_store: LocalStore,
) -> None:
    old = local_store.put_content(b"shared a long time ago")
    again = local_store.put_content(b"shared long ago, and again today")
    long_ago = time.time() - (local_store.state_ttl + timedelta(days=1, hours=1)).total_seconds()
    for digest in (old, again):
        os.utime(local_store.blobs.path(content_key(digest)), (long_ago, long_ago))
    local_store.put_content(b"shared long ago, and again today")  # restarts its retention
    fresh = local_store.put_content(b"shared today")
    local_store.collect_garbage()
    with pytest.raises(ContentMissing):
        local_store.get_content(old)
    assert local_store.get_content(again) == b"shared long ago, and again today"
    assert local_store.get_content(fresh) == b"shared today"
