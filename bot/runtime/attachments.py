"""Files people share in a conversation, as the model reads them: images as `input_image`,
PDFs and text files as `input_file` (Responses API input items).

A file is downloaded once, when the message it came with is first given to the model, and
its bytes are kept once in the store's content-addressed blobs (`Store.put_content`). The
session history (and so every checkpoint, whose run state holds the history it was given)
carries only a reference, `stored-file:<type>:<sha256>`, a few dozen bytes; the bytes are put
back in (`resolve`, the run's `call_model_input_filter`) just before each model call, and
never stored anywhere else. Limits (documented in the README):

- images (PNG, JPEG, GIF, WebP) up to 5 MB each; PDFs up to 10 MB; text files up to 1 MB;
  at most 10 files per message (Slack's own maximum);
- at most 32 MB of file bytes in one model request (base64 makes it ~43 MB, below OpenAI's
  50 MB): the newest files first; older ones are replaced by a line saying they were left out.

Anything else (other types, larger files, a download that fails) reaches the model as a line
naming the file and why it was not read, and the thread gets a note listing them."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from agents import TResponseInputItem
from agents.run_config import CallModelData, ModelInputData

from bot.runtime.context_source import ContextSource, SharedFile, Unavailable
from storage import ContentMissing, ConversationKey

if TYPE_CHECKING:
    from storage.calls import StorageCalls

log = logging.getLogger(__name__)
MB = 1024 * 1024
IMAGE_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WebP"}
IMAGE_LIMIT = 5 * MB
PDF_LIMIT = 10 * MB
TEXT_LIMIT = 1 * MB
FILES_PER_MESSAGE = 10
REQUEST_FILE_BYTES = 32 * MB
DOWNLOAD_SECONDS = 30.0  # per file: a slow download must not hold the thread for long
TEXT_TYPES = {"text/plain", "text/markdown", "text/csv", "application/json"}
TEXT_LIKE = {"application/xml", "application/x-yaml", "application/yaml", "application/x-sh"}
REF = "stored-file:"
WHAT_I_READ = "I read images (PNG, JPEG, GIF, WebP), PDFs and text files"


@dataclass(frozen=True)
class Kind:
    label: str  # how a note names it
    limit: int
    part: str  # the input item type
    mimetype: str  # the type the model is told


def kind_of(file: SharedFile) -> Kind | None:
    mimetype = file.mimetype.lower().split(";")[0].strip()
    if mimetype in IMAGE_TYPES:
        return Kind(f"{IMAGE_TYPES[mimetype]} image", IMAGE_LIMIT, "input_image", mimetype)
    if mimetype == "application/pdf":
        return Kind("PDF", PDF_LIMIT, "input_file", mimetype)
    if mimetype.startswith("text/") or mimetype in TEXT_TYPES | TEXT_LIKE:
        # The model is told a type it reads; the name says what the text is.
        told = mimetype if mimetype in TEXT_TYPES else "text/plain"
        return Kind("text file", TEXT_LIMIT, "input_file", told)
    return None


def human_size(size: int) -> str:
    if size >= MB:
        return f"{size / MB:.1f} MB"
    return f"{max(1, round(size / 1024))} KB"


@dataclass
class Attached:
    """One message's files, as input parts, plus a line per file for its text and the
    files that were not read (name, why)."""

    parts: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def reference(mimetype: str, digest: str) -> str:
    return f"{REF}{mimetype}:{digest}"


def parse_reference(value: object) -> tuple[str, str] | None:
    """(type, digest) of a stored-file reference, else None."""
    if not isinstance(value, str) or not value.startswith(REF):
        return None
    mimetype, _, digest = value[len(REF) :].rpartition(":")
    return (mimetype, digest) if mimetype and len(digest) == 64 else None


class ContentCache:
    """Recently used file bytes, so that the turns of one run do not read them again."""

    def __init__(self, max_bytes: int = 64 * MB) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._entries: OrderedDict[str, bytes] = OrderedDict()

    def get(self, digest: str) -> bytes | None:
        data = self._entries.get(digest)
        if data is not None:
            self._entries.move_to_end(digest)
        return data

    def put(self, digest: str, data: bytes) -> None:
        if len(data) > self.max_bytes // 4 or digest in self._entries:
            return
        self._entries[digest] = data
        self.size += len(data)
        while self.size > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self.size -= len(dropped)


class SharedFiles:
    """Keeping shared files (download, store once) and putting their bytes back into model
    requests."""

    def __init__(self, storage_calls: StorageCalls) -> None:
        self.storage_calls = storage_calls
        self.cache = ContentCache()

    async def attach(
        self, source: ContextSource, key: ConversationKey, files: list[SharedFile]
    ) -> Attached:
        attached = Attached()
        for index, file in enumerate(files):
            if index >= FILES_PER_MESSAGE:
                why = f"more than {FILES_PER_MESSAGE} files came with one message"
                attached.skipped.append((file.name, why))
                continue
            try:
                kind, data = await self._read(source, key, file)
            except Unavailable as exc:
                attached.skipped.append((file.name, exc.reason))
                continue
            digest = await self.storage_calls(self.storage_calls.store.put_content, data)
            self.cache.put(digest, data)
            attached.lines.append(f"[shared {kind.label} {file.name} ({human_size(len(data))})]")
            ref = reference(kind.mimetype, digest)
            if kind.part == "input_image":
                part = {"type": "input_image", "image_url": ref, "detail": "auto"}
            else:
                part = {"type": "input_file", "file_data": ref, "filename": file.name}
            attached.parts.append(part)
        for name, why in attached.skipped:
            attached.lines.append(f"[shared a file that was not read: {name} ({why})]")
        return attached

    async def _read(
        self, source: ContextSource, key: ConversationKey, file: SharedFile
    ) -> tuple[Kind, bytes]:
        kind = kind_of(file)
        if kind is None:
            what = file.mimetype or "unknown"
            raise Unavailable(f"{what} files are not something I read; {WHAT_I_READ}")
        if file.size > kind.limit:
            limit = human_size(kind.limit)
            raise Unavailable(f"{human_size(file.size)}, over the {limit} limit for a {kind.label}")
        try:
            data = await asyncio.wait_for(source.download(key, file, kind.limit), DOWNLOAD_SECONDS)
        except TimeoutError:
            raise Unavailable("the download took too long") from None
        if len(data) > kind.limit:
            raise Unavailable(f"over the {human_size(kind.limit)} limit for a {kind.label}")
        if kind.part == "input_file" and kind.mimetype != "application/pdf":
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                raise Unavailable("it is not UTF-8 text") from None
        return kind, data

    # -- before each model call -----------------------------------------------------------

    async def resolve(self, data: CallModelData[Any]) -> ModelInputData:
        """The run's `call_model_input_filter`: references become the bytes they name (as
        data URLs), newest first within REQUEST_FILE_BYTES. Never changes the items it is
        given (they are the session's)."""
        items = list(data.model_data.input)
        budget = REQUEST_FILE_BYTES
        for index in reversed(range(len(items))):
            item = items[index]
            content = item.get("content") if isinstance(item, dict) else None
            if not isinstance(content, list) or not any(_ref_of(p) for p in content):
                continue
            parts: list[Any] = []
            for part in content:
                found = _ref_of(part)
                if found is None:
                    parts.append(part)
                    continue
                bytes_, replaced = await self._bytes_for(part, found, budget)
                budget -= bytes_
                parts.append(replaced)
            items[index] = cast(TResponseInputItem, {**item, "content": parts})
        return ModelInputData(input=items, instructions=data.model_data.instructions)

    async def _bytes_for(
        self, part: dict[str, Any], found: tuple[str, str], budget: int
    ) -> tuple[int, dict[str, Any]]:
        mimetype, digest = found
        name = part.get("filename") or "an image"
        data = self.cache.get(digest)
        if data is None:
            try:
                data = await self.storage_calls(self.storage_calls.store.get_content, digest)
            except (ContentMissing, ValueError) as exc:
                log.warning("shared file %s is gone: %s", digest[:16], exc)
                return 0, {"type": "input_text", "text": f"[file {name} is no longer available]"}
            self.cache.put(digest, data)
        if len(data) > budget:
            left_out = f"[file {name} left out of this request: too many file bytes at once]"
            return 0, {"type": "input_text", "text": left_out}
        url = f"data:{mimetype};base64,{base64.b64encode(data).decode()}"
        if part.get("type") == "input_image":
            return len(data), {**part, "image_url": url}
        return len(data), {**part, "file_data": url}


def _ref_of(part: object) -> tuple[str, str] | None:
    if not isinstance(part, dict):
        return None
    if part.get("type") == "input_image":
        return parse_reference(part.get("image_url"))
    if part.get("type") == "input_file":
        return parse_reference(part.get("file_data"))
    return None
