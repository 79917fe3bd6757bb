"""Embedded backend: stdlib sqlite3 for records and a directory of write-once blobs."""

from storage.local.store import LocalStore

__all__ = ["LocalStore"]
