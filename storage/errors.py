"""Typed failures of the storage contract. Callers branch on these, never on backend errors."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from types import TracebackType


class StorageError(Exception):
    """Base class of every error raised by `storage`."""


class LeaseBusy(StorageError):
    """Another holder has the conversation's lease and it has not expired."""

    def __init__(self, key: str, owner: str | None, expires_at: datetime | None) -> None:
        super().__init__(f"conversation {key} is leased by {owner} until {expires_at}")
        self.key = key
        self.owner = owner
        self.expires_at = expires_at


class LeaseLost(StorageError):
    """The caller's lease was taken over or released: it must stop and write nothing more."""

    def __init__(self, key: str, fence: int) -> None:
        super().__init__(f"lease on {key} with fence {fence} is no longer held")
        self.key = key
        self.fence = fence


class NotFound(StorageError):
    """The conversation has no record (or its record expired)."""


class StorageUnavailable(StorageError):
    """A transient failure of the backing service (throttling, 5xx, a dropped or timed-out
    connection, a locked database): the operation may be retried later, unchanged."""


class WouldWait(StorageError):
    """The store cannot do a call on the caller's thread without waiting (for a lock
    another thread or process holds, or the network): the call is to be made on a worker
    thread instead, and may be made again, as every storage call may."""


class CheckpointConflict(StorageError):
    """The record's checkpoint version is not the one the writer expected."""

    def __init__(self, key: str, expected: int, actual: int | None) -> None:
        super().__init__(f"checkpoint of {key}: expected version {expected}, found {actual}")
        self.expected = expected
        self.actual = actual


class CheckpointError(StorageError):
    """A committed checkpoint cannot be trusted. `reason` says why, for the restart notice."""

    reason = "damaged"

    def __init__(self, object_key: str, detail: str) -> None:
        super().__init__(f"checkpoint {object_key}: {self.reason}: {detail}")
        self.object_key = object_key
        self.detail = detail


class CheckpointMissing(CheckpointError):
    reason = "missing"


class CheckpointTruncated(CheckpointError):
    reason = "truncated"


class CheckpointCorrupt(CheckpointError):
    reason = "corrupt"


class SessionItemError(StorageError):
    """A stored session item (or its offloaded blob) is missing or fails verification."""


class SessionConflict(StorageError):
    """Session items were staged against a sequence number that moved meanwhile."""


class BlobExists(StorageError):
    """A create-only object write found the object already there."""


class InboxChanged(StorageError):
    """Messages were queued after the writer last read the inbox: read it again."""


class ContentMissing(StorageError):
    """A content-addressed blob is gone (expired) or fails its digest."""

    def __init__(self, digest: str, detail: str) -> None:
        super().__init__(f"content {digest[:16]}: {detail}")
        self.digest = digest
        self.detail = detail


class Translating:
    """Around each call a store makes of its backend: a failure of the backend's own (a
    botocore or sqlite3 error) that `translate` tells in the contract's terms leaves as that
    error; any other passes through as it is. One instance serves every call (it keeps no
    state), so that the calls of every turn pay for no new object."""

    def __init__(self, translate: Callable[[BaseException], StorageError | None]) -> None:
        self.translate = translate

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None and (error := self.translate(exc)) is not None:
            raise error from exc
