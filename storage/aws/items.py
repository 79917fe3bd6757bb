"""Session item rows: what one atomic append writes, and reading rows back into items.

An item over `INLINE_ITEM_LIMIT` is written to S3 first (write-once, content-addressed) and
its row points at it; a batch beyond what one transaction may hold is written as one blob and
one row, so an append is always all-or-nothing. A blob that is gone (S3 lifecycle) or damaged
is a gap in the history, logged and skipped: never a reason to wedge a conversation. So is an
item that is not JSON."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from storage.aws.expressions import Item, n, s
from storage.aws.layout import item_sk, row
from storage.errors import CheckpointMissing
from storage.models import ConversationKey
from storage.text import decodes
from storage.writes import INLINE_ITEM_LIMIT, TRANSACTION_BYTES_LIMIT

log = logging.getLogger(__name__)
PutBlob = Callable[[str, bytes], None]
GetBlob = Callable[[str], bytes]


def item_rows(
    key: ConversationKey,
    generation: int,
    items: Sequence[str],
    base_seq: int,
    *,
    max_rows: int,
    expires: datetime,
    put_blob: PutBlob,
) -> list[Item]:
    """Rows for one atomic append of `items` at `base_seq`, at most `max_rows` of them."""
    if not items:
        return []
    sizes = [len(item.encode()) for item in items]
    inline_bytes = sum(size for size in sizes if size <= INLINE_ITEM_LIMIT)
    if len(items) > max_rows or inline_bytes > TRANSACTION_BYTES_LIMIT:
        data = json.dumps(list(items)).encode()
        blob_key = _offload(key, generation, base_seq, data, "batch", put_blob)
        body = {"blob_key": s(blob_key), "count": n(len(items))}
        return [row(key, item_sk(generation, base_seq), body, expires)]
    rows = []
    for offset, (item, size) in enumerate(zip(items, sizes, strict=True)):
        seq = base_seq + offset
        if size > INLINE_ITEM_LIMIT:
            blob_key = _offload(key, generation, seq, item.encode(), "item", put_blob)
            body = {"blob_key": s(blob_key)}
        else:
            body = {"data": s(item)}
        rows.append(row(key, item_sk(generation, seq), body, expires))
    return rows


def _offload(
    key: ConversationKey, generation: int, seq: int, data: bytes, kind: str, put_blob: PutBlob
) -> str:
    digest = hashlib.sha256(data).hexdigest()
    scope = f"g{generation}/" if generation else ""
    blob_key = f"items/{key.path}/{scope}{seq:012d}-{kind}-{digest}.json"
    put_blob(blob_key, data)
    return blob_key


def readable(item_row: Item, texts: list[str]) -> list[str]:
    """The items of `texts` (one row's, see `expand`) that are JSON; the others are logged
    and left out, like a gap."""
    kept = [text for text in texts if decodes(text)]
    _unreadable(item_row, len(texts) - len(kept))
    return kept


def popped(item_row: Item, texts: list[str]) -> tuple[int, str | None]:
    """Popping the newest item of one row's `texts` that is JSON: how many items stay in the
    row (those before it), and the item (None when none is: the row goes). Unreadable items
    after it go with it, logged."""
    for index in range(len(texts) - 1, -1, -1):
        if decodes(texts[index]):
            _unreadable(item_row, len(texts) - 1 - index)
            return index, texts[index]
    _unreadable(item_row, len(texts))
    return 0, None


def _unreadable(item_row: Item, count: int) -> None:
    if count:
        where = f"{item_row['pk']['S']} {item_row['sk']['S']}"
        log.error("%s: %d session item(s) not JSON: a gap in the history", where, count)


def expand(item_row: Item, get_blob: GetBlob) -> list[str]:
    """The items one row holds; [] (logged) when its blob is missing or damaged."""
    if "data" in item_row:
        return [item_row["data"]["S"]]
    blob_key = item_row["blob_key"]["S"]
    try:
        data = get_blob(blob_key)
    except CheckpointMissing:
        log.warning("session blob %s is gone (expired?): a gap in the history", blob_key)
        return []
    digest = blob_key.rsplit("-", 1)[-1].removesuffix(".json")
    if hashlib.sha256(data).hexdigest() != digest:
        log.error("session blob %s fails its sha256: a gap in the history", blob_key)
        return []
    if "count" not in item_row:
        return [data.decode()]
    batch: list[str] = json.loads(data)
    return batch[: int(item_row["count"]["N"])]
