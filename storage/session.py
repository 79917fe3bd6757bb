"""The Agents SDK `Session` for one conversation, on any `Store`.

Two modes:
- direct (no `staged`): every `add_items` is one atomic append, fenced when a lease is given;
  every read asks the store (others may append meanwhile), as the SDK's own sessions do.
- staged: what the SDK appends during a turn is held in memory and handed to
  `Store.commit` with the checkpoint, so items and checkpoint land in ONE atomic write
  (the runtime's mode; see `storage.base`). Reads see committed plus staged items; the
  committed ones it read (or was given, `known`) are kept, since the lease holder is their
  only writer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from storage.base import Store
from storage.calls import StorageCalls
from storage.models import ConversationKey, Lease
from storage.text import json_text

if TYPE_CHECKING:
    from agents.items import TResponseInputItem


KEEP_KNOWN = 200  # committed items kept known when the session reads without a limit


def dump_item(item: Any) -> str:
    """Items are stored as opaque JSON text, so they round-trip exactly (no Decimals, no
    dropped nulls, lone surrogates escaped): the SDK compares digests of
    `json.dumps(item, sort_keys=True)`."""
    return json_text(item)


@dataclass(frozen=True)
class KnownHistory:
    """The latest committed session items (oldest first) up to `next_seq`; `complete` when
    they are all the items there are."""

    items: list[str]
    next_seq: int
    complete: bool

    def covers(self, wanted: int | None) -> bool:
        return self.complete or (wanted is not None and wanted <= len(self.items))

    def extended(self, items: list[str], next_seq: int, keep: int) -> KnownHistory:
        """With `items` committed after these, up to `next_seq`: the latest `keep` of all."""
        joined = self.items + items
        return KnownHistory(joined[-keep:], next_seq, self.complete and len(joined) <= keep)


class ConversationSession:
    def __init__(
        self,
        store: Store,
        key: ConversationKey,
        *,
        lease: Lease | None = None,
        staged: bool = False,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        known: KnownHistory | None = None,
        calls: StorageCalls | None = None,
    ) -> None:
        if known is not None and not staged:
            raise ValueError("known history is for a staged session, whose lease holds it")
        self.store = store
        self.calls = calls or StorageCalls(store)  # retried like every storage call
        self.key = key
        self.lease = lease
        self.staged = staged
        self.session_id = str(key)
        # As the SDK's own sessions take them: a dict is read as settings, None as defaults.
        self.session_settings: SessionSettings | None = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self._pending: list[str] = []
        self._base_seq: int | None = None  # next_seq of the committed history we built on
        # The latest committed items, already known (a cache the caller validated against
        # the record's next_seq): reads it answers cost no request.
        self.known = known
        if known is not None:
            self._base_seq = known.next_seq

    # -- the Session protocol -----------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= len(self._pending):
            texts = self._pending[len(self._pending) - limit :] if limit > 0 else []
        else:
            wanted = None if limit is None else limit - len(self._pending)
            known = self.known
            if known is not None and known.covers(wanted):
                committed = (
                    known.items if wanted is None else known.items[-wanted:] if wanted else []
                )
            else:
                page = await self.calls(self.store.read_items, self.key, wanted)
                if self._base_seq is None or not self._pending:
                    self._base_seq = page.next_seq
                committed = page.items
                if self.staged and not self._pending and wanted is not None:
                    complete = len(page.items) < wanted
                    self.known = KnownHistory(list(page.items), page.next_seq, complete)
            texts = committed + self._pending
        return [json.loads(text) for text in texts]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if not items:
            return
        texts = [dump_item(item) for item in items]
        if self.staged:
            if self._base_seq is None:
                page = await self.calls(self.store.read_items, self.key, 0)
                self._base_seq = page.next_seq
            self._pending.extend(texts)
            return
        await self.calls(self.store.append_items, self.key, texts, self.lease)

    async def pop_item(self) -> TResponseInputItem | None:
        self.known = None
        if self._pending:
            return json.loads(self._pending.pop())  # type: ignore[no-any-return]
        text = await self.calls(self.store.pop_item, self.key, self.lease)
        return json.loads(text) if text is not None else None

    async def clear_session(self) -> None:
        self.known = None
        self._pending.clear()
        await self.calls(self.store.clear_items, self.key, self.lease)
        self._base_seq = None

    # -- staging (for the runtime's commit) ---------------------------------------------

    @property
    def pending(self) -> list[str]:
        """Items appended since the last commit, as stored JSON text."""
        return list(self._pending)

    @property
    def base_seq(self) -> int | None:
        return self._base_seq

    def committed(self, next_seq: int) -> None:
        """The store committed the pending items; later appends build on `next_seq`."""
        if self.known is not None and self.known.next_seq + len(self._pending) == next_seq:
            # No more than a read asks for is kept: what a run reads is bounded, so is this.
            keep = self.session_settings.limit if self.session_settings else None
            self.known = self.known.extended(self._pending, next_seq, keep or KEEP_KNOWN)
        else:
            self.known = None
        self._pending.clear()
        self._base_seq = next_seq

    def discard_pending(self) -> list[str]:
        """Drop uncommitted items (the turn they belong to will be redone or abandoned)."""
        dropped, self._pending = self._pending, []
        return dropped
