"""Where the application is installed, kept for it and opaque to storage: installation
documents (text, e.g. JSON) under string ids, kept until deleted, one-time states (e.g.
the `state` of an OAuth flow) that expire, and removals: a workspace that removed the
application, whose conversations are still to be discarded. Part of the `Store` contract:
both backends keep them next to the conversations (the aws backend in the same table, so
the table's encryption covers them)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Protocol

from pydantic import BaseModel, ConfigDict

INSTALL_ID_LIMIT = 512  # characters of an installation id or a state
DOCUMENT_LIMIT = 300_000  # bytes of one document, below DynamoDB's 400 KB item cap


class Removal(BaseModel):
    """A workspace (`team`; with `team` None, every workspace of `enterprise`) removed the
    application, and the application learnt it at `at`: its conversations that began
    before then are to be discarded. Keyed by `removal_id`, the id of what said so (an
    event's), so that being told twice records it once."""

    model_config = ConfigDict(frozen=True)

    removal_id: str
    team: str | None = None
    enterprise: str | None = None
    at: datetime


class InstallationsPart(Protocol):
    """A backend's installations, one-time states and removals: what `InstallationRecords`
    hands each call to."""

    def save(self, install_id: str, document: str) -> None: ...

    def find(self, install_id: str) -> str | None: ...

    def delete(self, install_id: str, *, only: str | None) -> bool: ...

    def issue_state(self, state: str, ttl: timedelta) -> bool: ...

    def consume_state(self, state: str) -> bool: ...

    def record_removal(self, removal: Removal) -> bool: ...

    def find_removal(self, removal_id: str) -> Removal | None: ...

    def pending_removals(self) -> list[Removal]: ...

    def finish_removal(self, removal_id: str) -> None: ...


class InstallationRecords:
    installations: InstallationsPart
    translating: AbstractContextManager[None]

    def save_installation(self, install_id: str, document: str) -> None:
        """Keep `document` under `install_id`, replacing what was there (the latest wins).
        Kept until deleted: no TTL applies."""
        with self.translating:
            self.installations.save(install_id, document)

    def find_installation(self, install_id: str) -> str | None:
        """The document kept under `install_id`, or None."""
        with self.translating:
            return self.installations.find(install_id)

    def delete_installation(self, install_id: str, *, only: str | None = None) -> bool:
        """Forget `install_id`; True when there was a document. With `only`, only when the
        document kept is that one (one saved since it was read, a re-install, stays)."""
        with self.translating:
            return self.installations.delete(install_id, only=only)

    def issue_state(self, state: str, ttl: timedelta) -> bool:
        """Remember `state` (a random value) for `ttl`, to be consumed once. False, and
        nothing changes, when `state` is remembered already and has not expired: of two
        callers issuing one value, one wins (so a state may also record a value as used)."""
        with self.translating:
            return self.installations.issue_state(state, ttl)

    def consume_state(self, state: str) -> bool:
        """True once for a state that was issued and has not expired; it is gone after."""
        with self.translating:
            return self.installations.consume_state(state)

    def record_removal(self, removal: Removal) -> bool:
        """Remember `removal` as pending until `finish_removal`: True. False, and nothing
        changes, when its id is remembered already (pending, or finished less than
        `event_ttl` ago): the same removal told again."""
        with self.translating:
            return self.installations.record_removal(removal)

    def find_removal(self, removal_id: str) -> Removal | None:
        """The removal remembered under `removal_id` (pending or finished), or None."""
        with self.translating:
            return self.installations.find_removal(removal_id)

    def pending_removals(self) -> list[Removal]:
        """The removals recorded and not finished, oldest first (one per uninstall: few)."""
        with self.translating:
            return self.installations.pending_removals()

    def finish_removal(self, removal_id: str) -> None:
        """The removal is done: no longer pending; its id is remembered for `event_ttl`."""
        with self.translating:
            self.installations.finish_removal(removal_id)


def check_id(value: str, what: str = "installation id") -> str:
    if not value or len(value) > INSTALL_ID_LIMIT:
        raise ValueError(f"{what}: 1 to {INSTALL_ID_LIMIT} characters")
    return value


def check_document(document: str) -> str:
    if len(document.encode()) > DOCUMENT_LIMIT:
        raise ValueError(f"an installation document is at most {DOCUMENT_LIMIT} bytes")
    return document
