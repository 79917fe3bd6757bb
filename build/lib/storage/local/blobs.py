"""Write-once files: the local stand-in for S3 objects written with `IfNoneMatch="*"`."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from storage.errors import BlobExists, CheckpointMissing, StorageError


class BlobDir:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, object_key: str) -> Path:
        path = (self.root / object_key).resolve()
        if self.root.resolve() not in path.parents:
            raise StorageError(f"object key escapes the blob directory: {object_key}")
        return path

    def put_new(self, object_key: str, data: bytes) -> None:
        """Durable and atomic: written to a temp file, fsynced, then hard-linked into place,
        which fails if the name exists (so two writers can never both win)."""
        target = self.path(object_key)
        tmp = _written(target, data)
        try:
            os.link(tmp, target)
        except FileExistsError as exc:
            raise BlobExists(object_key) from exc
        else:
            _fsync_dir(target.parent)
        finally:
            os.unlink(tmp)

    def refresh(self, object_key: str, data: bytes) -> None:
        """Write a content-addressed blob whether or not it is there (its name fixes its
        bytes): atomic (a temp file renamed over it), and it counts as written now, since
        `gc` reckons a blob's age from its last write, as S3's lifecycle rule does."""
        target = self.path(object_key)
        tmp = _written(target, data)
        try:
            os.replace(tmp, target)
            _fsync_dir(target.parent)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def get(self, object_key: str) -> bytes:
        try:
            return self.path(object_key).read_bytes()
        except FileNotFoundError as exc:
            raise CheckpointMissing(object_key, "no such object") from exc

    def delete(self, object_key: str) -> None:
        self.path(object_key).unlink(missing_ok=True)

    def keys(self, prefix: str) -> list[tuple[str, float]]:
        """(object key, modification time) of every blob under `prefix`."""
        base = self.root / prefix
        if not base.exists():
            return []
        return [
            (str(path.relative_to(self.root)), path.stat().st_mtime)
            for path in base.rglob("*")
            if path.is_file() and not path.name.startswith(".tmp-")
        ]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _written(target: Path, data: bytes) -> str:
    """`data` in a temp file beside `target`, flushed to disk; the caller links or renames
    it into place and removes what is left."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp
