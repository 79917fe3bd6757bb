"""Checkpoint bytes: compact JSON, gzip, sha256. Loading verifies everything it can."""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import Any

from storage.errors import CheckpointCorrupt, CheckpointTruncated
from storage.models import CheckpointPointer
from storage.text import json_text


@dataclass(frozen=True)
class EncodedCheckpoint:
    data: bytes
    sha256: str

    @property
    def size(self) -> int:
        return len(self.data)


def encode_state(state: dict[str, Any] | str) -> EncodedCheckpoint:
    """`state` is `RunState.to_json()` or `to_string()`; stored as compact JSON, gzipped."""
    document = json.loads(state) if isinstance(state, str) else state
    raw = json_text(document).encode()
    # mtime=0 keeps the bytes (and the hash) a pure function of the state.
    data = gzip.compress(raw, compresslevel=6, mtime=0)
    return EncodedCheckpoint(data=data, sha256=hashlib.sha256(data).hexdigest())


def decode_state(pointer: CheckpointPointer, data: bytes) -> dict[str, Any]:
    """Verify `data` against `pointer` and return the RunState JSON document."""
    key = pointer.object_key
    if len(data) < pointer.size:
        raise CheckpointTruncated(key, f"{len(data)} of {pointer.size} bytes")
    if len(data) != pointer.size:
        raise CheckpointCorrupt(key, f"size {len(data)}, expected {pointer.size}")
    if hashlib.sha256(data).hexdigest() != pointer.sha256:
        raise CheckpointCorrupt(key, "sha256 mismatch")
    try:
        document = json.loads(gzip.decompress(data))
    except (OSError, EOFError, zlib.error, ValueError) as exc:
        raise CheckpointCorrupt(key, f"unreadable: {exc}") from exc
    if not isinstance(document, dict):
        raise CheckpointCorrupt(key, "not a JSON object")
    return document
