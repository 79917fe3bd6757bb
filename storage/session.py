"""The Agents SDK `Session` for one conversation, on any `Store`.

Two modes:
- direct (no `staged`): every `add_items` is one atomic append, fenced when a lease is given.
- staged: what the SDK appends during a turn is held in memory and handed to
  `Store.commit` with the checkpoint, so items and checkpoint land in ONE atomic write
  (the runtime's mode; see `storage.base`). Reads see committed plus staged items.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from agents.memory.session_settings import SessionSettings, resolve_session_limit

from storage.base import Store
from storage.models import ConversationKey, Lease

if TYPE_CHECKING:
    from agents.items import TResponseInputItem


def dump_item(item: Any) -> str:
    """Items are stored as opaque JSON text, so they round-trip exactly (no Decimals, no
    dropped nulls): the SDK compares digests of `json.dumps(item, sort_keys=True)`."""
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"))


class ConversationSession:
    def __init__(
        self,
        store: Store,
        key: ConversationKey,
        *,
        lease: Lease | None = None,
        staged: bool = False,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.store = store
        self.key = key
        self.lease = lease
        self.staged = staged
        self.session_id = str(key)
        self.session_settings = session_settings
        self._pending: list[str] = []
        self._base_seq: int | None = None  # next_seq of the committed history we built on

    # -- the Session protocol -----------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= len(self._pending):
            texts = self._pending[len(self._pending) - limit :] if limit > 0 else []
        else:
            wanted = None if limit is None else limit - len(self._pending)
            page = await asyncio.to_thread(self.store.read_items, self.key, wanted)
            if self._base_seq is None or not self._pending:
                self._base_seq = page.next_seq
            texts = page.items + self._pending
        return [json.loads(text) for text in texts]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if not items:
            return
        texts = [dump_item(item) for item in items]
        if self.staged:
            if self._base_seq is None:
                page = await asyncio.to_thread(self.store.read_items, self.key, 0)
                self._base_seq = page.next_seq
            self._pending.extend(texts)
            return
        await asyncio.to_thread(self.store.append_items, self.key, texts, self.lease)

    async def pop_item(self) -> TResponseInputItem | None:
        if self._pending:
            return json.loads(self._pending.pop())  # type: ignore[no-any-return]
        text = await asyncio.to_thread(self.store.pop_item, self.key, self.lease)
        return json.loads(text) if text is not None else None

    async def clear_session(self) -> None:
        self._pending.clear()
        await asyncio.to_thread(self.store.clear_items, self.key, self.lease)
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
        self._pending.clear()
        self._base_seq = next_seq

    def discard_pending(self) -> list[str]:
        """Drop uncommitted items (the turn they belong to will be redone or abandoned)."""
        dropped, self._pending = self._pending, []
        return dropped
