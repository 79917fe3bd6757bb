"""What the bot keeps of one person of a workspace, apart from conversations: that they were
greeted (so that opening the app's messages does not greet them again), what they were last
seen viewing in the chat surface (opaque to storage), and their recent conversations (the
newest first, a few). One small record per person, changed by read, change, conditional
write (retried on a conflict), so that two replicas changing one record at once both land.
Part of the `Store` contract: both backends keep it next to the conversations. A record not
written for `PERSON_TTL` is forgotten (and its person greeted again)."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from storage.models import ConversationKey

PERSON_TTL = timedelta(days=365)
RECENT_LIMIT = 10  # conversations a person's record names
VIEWING_LIMIT = 4_000  # bytes of what a person is viewing
CHANGE_ATTEMPTS = 10  # a person's record is rarely written by two at once


class PersonKey(BaseModel):
    """One person of one workspace: `[enterprise:]team:user`."""

    model_config = ConfigDict(frozen=True)

    team: str = Field(min_length=1, max_length=64, pattern=r"^[^:/\s#]+$")
    user: str = Field(min_length=1, max_length=64, pattern=r"^[^:/\s#]+$")
    enterprise: str | None = Field(default=None, min_length=1, pattern=r"^[^:/\s#]+$")

    def __str__(self) -> str:
        workspace = f"{self.enterprise}:{self.team}" if self.enterprise else self.team
        return f"{workspace}:{self.user}"

    @classmethod
    def of(cls, key: ConversationKey, user: str) -> PersonKey:
        """`user` in the workspace of a conversation."""
        return cls(team=key.team, user=user, enterprise=key.enterprise)


class Person(BaseModel):
    key: PersonKey
    greeted_at: datetime | None = None
    viewing: str | None = Field(default=None, description="opaque to storage (the caller's)")
    viewing_at: datetime | None = None
    recent: list[ConversationKey] = Field(default_factory=list, description="newest first")
    updated_at: datetime
    version: int = Field(default=0, description="grows with every write (the write's check)")

    def document(self) -> str:
        """The record as stored, without its key and version (kept beside it)."""
        return self.model_dump_json(exclude={"key", "version"})

    @classmethod
    def from_document(cls, key: PersonKey, document: str, version: int) -> Person:
        return cls.model_validate({**json.loads(document), "key": key, "version": version})


Change = Callable[[Person], Person | None]


class PeoplePart(Protocol):
    """A backend's person records: what `PersonRecords` hands its reads and changes to."""

    def get(self, key: PersonKey) -> Person | None: ...

    def change(self, key: PersonKey, change: Change) -> Person | None: ...


class PersonRecords:
    people: PeoplePart
    translating: AbstractContextManager[None]
    clock: Callable[[], datetime]

    def get_person(self, key: PersonKey) -> Person | None:
        """The person's record, or None (never written, or forgotten)."""
        with self.translating:
            return self.people.get(key)

    def _change_person(self, key: PersonKey, change: Change) -> Person | None:
        """Read the record (a blank one when there is none), apply `change` and write what
        it returns, on the condition that nobody wrote meanwhile; on a conflict, again from
        a fresh read (`CHANGE_ATTEMPTS` in all). `change` returning None writes nothing.
        Returns what was written (None: nothing)."""
        with self.translating:
            return self.people.change(key, change)

    def mark_greeted(self, key: PersonKey) -> bool:
        """True for the one call that marks the person greeted; False once they are."""

        def greet(person: Person) -> Person | None:
            if person.greeted_at is not None:
                return None
            return person.model_copy(update={"greeted_at": self.clock()})

        return self._change_person(key, greet) is not None

    def unmark_greeted(self, key: PersonKey) -> None:
        """The greeting could not be shown: the next opening greets them."""

        def forget(person: Person) -> Person | None:
            return person.model_copy(update={"greeted_at": None}) if person.greeted_at else None

        self._change_person(key, forget)

    def note_viewing(self, key: PersonKey, viewing: str, at: datetime) -> bool:
        """What the person is viewing as of `at`; an older report than the one kept changes
        nothing (False)."""
        if len(viewing.encode()) > VIEWING_LIMIT:
            raise ValueError(f"what a person views is at most {VIEWING_LIMIT} bytes")

        def note(person: Person) -> Person | None:
            if person.viewing_at is not None and person.viewing_at > at:
                return None
            return person.model_copy(update={"viewing": viewing, "viewing_at": at})

        return self._change_person(key, note) is not None

    def note_conversation(self, key: PersonKey, conversation: ConversationKey) -> None:
        """The person started (or went back to) `conversation`: first of their recent ones.
        Writes nothing when it is first already. (A release can carry the same note:
        `Store.release(note=...)`.)"""
        self._change_person(key, noting(conversation))


def noting(conversation: ConversationKey) -> Change:
    """The change that puts `conversation` first among a person's recent ones (nothing to
    write when it is first already)."""

    def note(person: Person) -> Person | None:
        if person.recent[:1] == [conversation]:
            return None
        recent = [conversation, *(c for c in person.recent if c != conversation)]
        return person.model_copy(update={"recent": recent[:RECENT_LIMIT]})

    return note


def blank(key: PersonKey, now: datetime) -> Person:
    return Person(key=key, updated_at=now)


def changed(person: Person, change: Change, now: datetime) -> Person | None:
    """What a write stores: the change, stamped with its moment and the next version."""
    new = change(person)
    if new is None:
        return None
    return new.model_copy(update={"updated_at": now, "version": person.version + 1})
