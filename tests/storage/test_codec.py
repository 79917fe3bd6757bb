"""Checkpoint bytes (`storage.codec`): compact JSON, gzip, sha256, and every way loading
them can find them damaged."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest

from storage import CheckpointCorrupt, CheckpointPointer, CheckpointTruncated
from storage.codec import EncodedCheckpoint, decode_state, encode_state
from testkit.pointers import checkpoint_pointer

STATE = {"$schemaVersion": "1.21", "text": "héllo ✓", "n": None, "items": list(range(50))}


def pointer_for(encoded: EncodedCheckpoint | bytes) -> CheckpointPointer:
    data = encoded.data if isinstance(encoded, EncodedCheckpoint) else encoded
    return checkpoint_pointer("checkpoints/T1/C1/1.0/v1.json.gz", data=data)


def test_encoding_is_compact_gzip_and_deterministic() -> None:
    encoded = encode_state(STATE)
    assert encoded == encode_state(STATE)  # no time stamp in the gzip header
    assert encoded == encode_state(json.dumps(STATE))  # RunState.to_string() alike
    assert encoded.size == len(encoded.data)
    assert encoded.sha256 == hashlib.sha256(encoded.data).hexdigest()
    raw = gzip.decompress(encoded.data)
    assert b": " not in raw and b", " not in raw
    assert "héllo ✓".encode() in raw  # UTF-8, not \\u escapes


def test_decoding_returns_the_state() -> None:
    encoded = encode_state(STATE)
    assert decode_state(pointer_for(encoded), encoded.data) == STATE


def test_truncated_data() -> None:
    encoded = encode_state(STATE)
    with pytest.raises(CheckpointTruncated) as truncated:
        decode_state(pointer_for(encoded), encoded.data[:-1])
    assert truncated.value.object_key == pointer_for(encoded).object_key
    assert f"{encoded.size - 1} of {encoded.size} bytes" in str(truncated.value)


def test_longer_data() -> None:
    encoded = encode_state(STATE)
    with pytest.raises(CheckpointCorrupt, match="size"):
        decode_state(pointer_for(encoded), encoded.data + b"\0")


def test_a_changed_byte() -> None:
    encoded = encode_state(STATE)
    damaged = bytearray(encoded.data)
    damaged[len(damaged) // 2] ^= 0x01
    with pytest.raises(CheckpointCorrupt, match="sha256"):
        decode_state(pointer_for(encoded), bytes(damaged))


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        (b"not gzip at all", "unreadable"),
        (gzip.compress(b"{not json", mtime=0), "unreadable"),
        (gzip.compress(b"\xff\xfe", mtime=0), "unreadable"),
        (gzip.compress(b"[1, 2, 3]", mtime=0), "not a JSON object"),
    ],
)
def test_data_that_matches_its_pointer_but_is_no_state(data: bytes, detail: str) -> None:
    with pytest.raises(CheckpointCorrupt, match=detail):
        decode_state(pointer_for(data), data)
