"""Content-addressed blobs: bytes kept once under their sha256, for whatever a conversation
refers to by digest (files people shared) instead of copying it into every checkpoint.

`put_content` of bytes already there writes no second copy: it restarts the blob's
retention (S3's lifecycle rule and the local `gc` count from the last write), so a blob
outlives the newest history row that refers to it, however often it is shared. Reads verify
the digest: a missing or damaged blob is `ContentMissing`, never other bytes."""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod

from storage.errors import CheckpointMissing, ContentMissing

CONTENT_PREFIX = "files/"  # the lifecycle rule (infra/template.yaml) and `gc` expire it
DIGEST = re.compile(r"[0-9a-f]{64}")


def content_key(digest: str) -> str:
    """The object key of a digest; ValueError for anything that is not a sha256 in hex."""
    if not DIGEST.fullmatch(digest):
        raise ValueError(f"not a sha256 digest: {digest[:80]!r}")
    return f"{CONTENT_PREFIX}{digest[:2]}/{digest}"


class ContentBlobs(ABC):
    """The content-addressed part of the storage contract (both backends)."""

    def put_content(self, data: bytes) -> str:
        """Keep `data` once; returns its sha256 (hex), the name to read it back by."""
        digest = hashlib.sha256(data).hexdigest()
        self.refresh_blob(content_key(digest), data)
        return digest

    def get_content(self, digest: str) -> bytes:
        """The bytes kept under `digest`. Raises `ContentMissing` when they are gone (expired)
        or fail their digest, ValueError for a malformed digest."""
        object_key = content_key(digest)
        try:
            data = self.get_blob(object_key)
        except CheckpointMissing as exc:
            raise ContentMissing(digest, "no such blob") from exc
        if hashlib.sha256(data).hexdigest() != digest:
            raise ContentMissing(digest, "its bytes fail their sha256")
        return data

    # The store's blob primitives (see `Store`), which a crash test may wrap.

    @abstractmethod
    def refresh_blob(self, object_key: str, data: bytes) -> None: ...

    @abstractmethod
    def get_blob(self, object_key: str) -> bytes: ...
