"""Checkpoint size when people share files: two threads of the same turns on DynamoDB Local
and moto S3, one with text only, one where every message shares a new 1 MB PNG (and every
tenth shares the first one again). The files are kept once, by digest, in the store's
`files/` blobs; the history and so every checkpoint carry only a reference, so the
checkpoint stays as small as the text-only thread's.

The files come through the runtime's `ContextSource` interface (`testkit.runtime.FileSource`,
a dictionary of bytes in place of Slack's downloads); the model is the benchmark's scripted
one, which reads the text and answers."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any

from bench.agents import build_agent
from bench.common import section, table, unique_key
from bench.emulators import Emulators
from bot.runtime import ConversationRuntime, SharedFile
from bot.settings import RuntimeSettings
from testkit.runtime import FileSource

MB = 1024 * 1024
MARKS = (1, 10, 40)


@dataclass
class Thread:
    label: str
    checkpoint_bytes: dict[int, int] = field(default_factory=dict)
    shared_bytes: int = 0  # file bytes people shared, repeats included


async def one_thread(emulators: Emulators, turns: int, *, files: bool) -> Thread:
    store = emulators.store("files")
    source = FileSource()
    runtime = ConversationRuntime(store, build_agent(), RuntimeSettings(), source=source)
    key = unique_key("CF")
    thread = Thread("a new 1 MB image with every message" if files else "text only")
    first: SharedFile | None = None
    for n in range(1, turns + 1):
        shared: list[SharedFile] = []
        if files:
            again = first is not None and n % 10 == 0
            shared = [first if again and first else source.share(_png(MB))]
            first = first or shared[0]
            thread.shared_bytes += shared[0].size
        await runtime.intake.keep_message(
            key,
            event_id=uuid.uuid4().hex,
            user="UALICE",
            text=f"what do you see, {n}?",
            take=True,
            files=shared,
        )
        await runtime.serve(key)
        if n in MARKS or n == turns:
            record = store.get(key)
            assert record is not None and record.checkpoint is not None
            thread.checkpoint_bytes[n] = record.checkpoint.size
    runtime.storage_calls.close()
    store.close()
    return thread


def _png(size: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + os.urandom(size - 8)


async def run_files(emulators: Emulators, turns: int = 40) -> list[Thread]:
    return [
        await one_thread(emulators, turns, files=False),
        await one_thread(emulators, turns, files=True),
    ]


def report(threads: list[Thread]) -> dict[str, Any]:
    marks = sorted({n for t in threads for n in t.checkpoint_bytes})
    rows = [
        [
            t.label,
            *(f"{t.checkpoint_bytes.get(n, 0) / 1024:.1f} KB" for n in marks),
            f"{t.shared_bytes / MB:.0f} MB",
        ]
        for t in threads
    ]
    section(
        "Checkpoint size when files are shared",
        "The checkpoint (gzipped RunState plus envelope) after turn N of one thread, and the "
        "file bytes people shared in it (kept once each, by sha256, outside checkpoints).",
    )
    headers = ["thread", *(f"turn {n}" for n in marks), "shared"]
    print(table(headers, rows), flush=True)
    return {t.label: {"checkpoint_bytes": t.checkpoint_bytes} for t in threads}
