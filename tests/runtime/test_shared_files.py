"""Files people share, at the runtime: kept once as content-addressed blobs, referenced from
the history, put back into each model request; checkpoints do not grow with them; a file
that is gone or unreadable becomes a line for the model and a note for the thread."""

from __future__ import annotations

import base64
import hashlib
import os

from agents import Agent

from bot.runtime import Answer, ConversationRuntime, Notice, NoticeKind
from bot.settings import RuntimeSettings
from storage import ConversationKey, Store
from testkit.runtime import KEY, FileSource, content_parts, echo_model, history, record_of

OTHER = ConversationKey(team=KEY.team, channel=KEY.channel, thread_ts="1700000200.000100")
IMAGE = 256 * 1024


async def test_checkpoints_stay_flat_when_files_are_shared(store: Store) -> None:
    source = FileSource()
    model = echo_model(12)
    runtime = ConversationRuntime(
        store, Agent(name="assistant", model=model), RuntimeSettings(), source=source
    )
    plain: list[int] = []
    with_files: list[int] = []
    last = b""
    for n in range(6):
        await runtime.intake.keep_message(
            KEY, event_id=f"A{n}", user="U1", text=f"see {n}", take=True
        )
        await runtime.serve(KEY)
        plain.append(record_of(store, KEY).checkpoint.size)  # type: ignore[union-attr]
        last = os.urandom(IMAGE)
        shared = [source.share(last)]
        await runtime.intake.keep_message(
            OTHER, event_id=f"B{n}", user="U1", text=f"see {n}", take=True, files=shared
        )
        await runtime.serve(OTHER)
        with_files.append(record_of(store, OTHER).checkpoint.size)  # type: ignore[union-attr]

    # 1.5 MB shared; each checkpoint within a few hundred bytes of the text-only thread's.
    assert all(b - a < 1024 for a, b in zip(plain, with_files, strict=True)), (plain, with_files)
    # Every image reached the last model call as bytes; the history holds references only.
    images = content_parts(model.calls[-1], "input_image")
    assert len(images) == 6
    assert images[-1]["image_url"] == "data:image/png;base64," + base64.b64encode(last).decode()
    stored = str(history(store, OTHER))
    assert len(stored) < 10_000
    assert store.get_content(hashlib.sha256(last).hexdigest()) == last


async def test_unreadable_and_unsupported_files_are_named_and_noted(store: Store) -> None:
    source = FileSource()
    model = echo_model(2)
    runtime = ConversationRuntime(
        store, Agent(name="assistant", model=model), RuntimeSettings(), source=source
    )
    gone = source.share(b"x", name="gone.png")
    del source.files[gone.id]
    video = source.share(b"\x00" * 10, mimetype="video/mp4", name="clip.mp4")
    huge = source.share(b"\x89PNG" + b"0" * 10, name="huge.png").model_copy(
        update={"size": 50 * 1024 * 1024}
    )
    await runtime.intake.keep_message(
        KEY, event_id="E1", user="U1", text="look", take=True, files=[gone, video, huge]
    )
    outcomes = await runtime.serve(KEY)
    notes = [o for o in outcomes if isinstance(o, Notice)]
    assert [n.kind for n in notes] == [NoticeKind.FILES_NOT_READ]
    assert notes[0].details == [
        "gone.png: it is gone",
        "clip.mp4: video/mp4 files are not something I read; I read images (PNG, JPEG, GIF, "
        "WebP), PDFs and text files",
        "huge.png: 50.0 MB, over the 5.0 MB limit for a PNG image",
    ]
    assert [type(o) for o in outcomes if not isinstance(o, Notice)] == [Answer]
    assert source.downloads == 1  # only the one that might have been read was asked for
    assert "[shared a file that was not read: clip.mp4" in str(model.calls[0].input)
