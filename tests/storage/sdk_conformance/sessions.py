"""What the SDK's own tests get from us (see README.md): a `Session` on our storage where
they build theirs, and RunStates that go through our checkpoint commit where they
serialize them. Each test runs on one backend (`bound`); its sessions live in their own
workspace of that backend's store, so tests never see one another's conversations."""

from __future__ import annotations

import hashlib
import itertools
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.items import TResponseInputItem
from agents.memory import SessionSettings

from storage import CheckpointMeta, ConversationKey, ConversationSession, Store
from storage.session import dump_item


@dataclass
class Binding:
    store: Store
    workspace: str = field(default_factory=lambda: f"T{uuid.uuid4().hex[:12]}")
    fresh: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def key(self, channel: str) -> ConversationKey:
        return ConversationKey(team=self.workspace, channel=channel, thread_ts="1")


_bound: list[Binding] = []


@contextmanager
def bound(store: Store) -> Iterator[Binding]:
    """The store the sessions and checkpoints of one test go to."""
    binding = Binding(store)
    _bound.append(binding)
    try:
        yield binding
    finally:
        _bound.remove(binding)


def binding() -> Binding:
    assert _bound, "the conformance conftest binds a store to every test"
    return _bound[-1]


class StoreSession(ConversationSession):
    """Our `ConversationSession` (direct mode, as any SDK user would hold it), built with the
    arguments of the session it stands in for: `SQLiteSession(session_id, db_path, ...)` or
    the SDK tests' in-memory `SimpleListSession(session_id, history)`. A session with a
    database file is that file's conversation `session_id`; one without (in memory) is a
    conversation of its own, as a new in-memory session is. It reports the `session_id`
    it was given, as those do."""

    def __init__(
        self,
        session_id: str = "test",
        db_path: str | Path | None = None,
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: SessionSettings | dict[str, Any] | None = None,
        *,
        history: list[TResponseInputItem] | None = None,
    ) -> None:
        bound_to = binding()
        if db_path is None or str(db_path) == ":memory:":
            channel = f"M{next(bound_to.fresh)}"
        else:
            where = f"{Path(db_path).resolve()}|{sessions_table}|{messages_table}|{session_id}"
            channel = f"F{hashlib.sha256(where.encode()).hexdigest()[:16]}"
        key = bound_to.key(channel)
        super().__init__(bound_to.store, key, session_settings=session_settings)
        self.session_id = session_id
        if history:
            bound_to.store.append_items(key, [dump_item(item) for item in history])

    def close(self) -> None:
        """`SQLiteSession.close`: nothing to do, the store outlives its sessions."""

    @property
    def _items(self) -> list[TResponseInputItem]:
        """`SimpleListSession`'s list, which its tests read: what the store holds."""
        return [json.loads(text) for text in self.store.read_items(self.key).items]


def write_raw_item(session: StoreSession, text: str) -> None:
    """A row holding `text` as it is, JSON or not (a damaged row), written by the store."""
    session.store.append_items(session.key, [text])


def checkpointed(document: dict[str, Any]) -> dict[str, Any]:
    """`document` (a `RunState.to_json()`) committed as a checkpoint of a conversation of
    its own and loaded back, as the bot saves and resumes a run."""
    bound_to = binding()
    store = bound_to.store
    key = bound_to.key(f"K{next(bound_to.fresh)}")
    lease, _ = store.acquire(key, "sdk-conformance")
    done = store.commit(
        lease,
        state=document,
        meta=CheckpointMeta(
            schema_version=str(document.get("$schemaVersion")), agent_fingerprint="sdk-tests"
        ),
        expected_version=0,
    )
    assert done.checkpoint is not None
    return store.load_checkpoint(done.checkpoint)
