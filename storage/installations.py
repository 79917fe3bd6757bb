"""Where the application is installed, kept for it and opaque to storage: installation
documents (text, e.g. JSON) under string ids, kept until deleted, one-time states (e.g.
the `state` of an OAuth flow) that expire, and removals: a workspace that removed the
application, whose conversations are still to be discarded. Part of the `Store` contract:
both backends keep them next to the conversations (the aws backend in the same table, so
the table's encryption covers them)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime, timedelta

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


class InstallationRecords(ABC):
    @abstractmethod
    def save_installation(self, install_id: str, document: str) -> None:
        """Keep `document` under `install_id`, replacing what was there (the latest wins).
        Kept until deleted: no TTL applies."""

    @abstractmethod
    def find_installation(self, install_id: str) -> str | None:
        """The document kept under `install_id`, or None."""

    @abstractmethod
    def delete_installation(self, install_id: str, *, only: str | None = None) -> bool:
        """Forget `install_id`; True when there was a document. With `only`, only when the
        document kept is that one (one saved since it was read, a re-install, stays)."""

    @abstractmethod
    def issue_state(self, state: str, ttl: timedelta) -> bool:
        """Remember `state` (a random value) for `ttl`, to be consumed once. False, and
        nothing changes, when `state` is remembered already and has not expired: of two
        callers issuing one value, one wins (so a state may also record a value as used)."""

    @abstractmethod
    def consume_state(self, state: str) -> bool:
        """True once for a state that was issued and has not expired; it is gone after."""

    @abstractmethod
    def record_removal(self, removal: Removal) -> bool:
        """Remember `removal` as pending until `finish_removal`: True. False, and nothing
        changes, when its id is remembered already (pending, or finished less than
        `event_ttl` ago): the same removal told again."""

    @abstractmethod
    def find_removal(self, removal_id: str) -> Removal | None:
        """The removal remembered under `removal_id` (pending or finished), or None."""

    @abstractmethod
    def pending_removals(self) -> list[Removal]:
        """The removals recorded and not finished, oldest first (one per uninstall: few)."""

    @abstractmethod
    def finish_removal(self, removal_id: str) -> None:
        """The removal is done: no longer pending; its id is remembered for `event_ttl`."""


def check_id(value: str, what: str = "installation id") -> str:
    if not value or len(value) > INSTALL_ID_LIMIT:
        raise ValueError(f"{what}: 1 to {INSTALL_ID_LIMIT} characters")
    return value


def check_document(document: str) -> str:
    if len(document.encode()) > DOCUMENT_LIMIT:
        raise ValueError(f"an installation document is at most {DOCUMENT_LIMIT} bytes")
    return document
