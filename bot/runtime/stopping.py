"""Stopping a run on request (the Stop control, or the reply `stop` while it runs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.runtime import trust
from bot.runtime.envelope import Envelope
from bot.runtime.outcomes import Notice, NoticeKind
from storage import CheckpointError, Status

if TYPE_CHECKING:
    from bot.runtime.serving import Serving


async def stopped(serving: Serving, consume: list[str]) -> None:
    """Someone asked the run to stop: it ends here. Its open calls are closed as the ledger
    says (a call that ran is said to have run), the checkpoint is replaced by a finished one
    with the notice, messages that came for this run are dropped (and counted), and the next
    message starts a fresh run. Nothing of the run is posted after the notice."""
    record = serving.record
    who = serving.keeper.stop_by if serving.keeper else None
    envelope = None
    if record.checkpoint is not None:
        try:
            document = await serving.io(serving.store.load_checkpoint, record.checkpoint)
            envelope = Envelope.model_validate(document)
        except (CheckpointError, ValueError):
            envelope = None
    closed = await trust.close_calls(serving.io, serving.store, serving.key, record.generation)
    held = len(envelope.held) if envelope else 0
    dropped = (
        f" {held} message{'s' if held != 1 else ''} sent during the run "
        f"{'were' if held != 1 else 'was'} not answered."
        if held
        else ""
    )
    lost = f" {closed.describe()}" if closed.all else ""
    notice = Notice(
        key=serving.key,
        kind=NoticeKind.STOPPED,
        text=f"Stopped by <@{who}>.{lost}{dropped} Send a new message to start again."
        if who
        else f"Stopped.{lost}{dropped} Send a new message to start again.",
        settles=closed.all,
    )
    old = record.checkpoint
    tombstone = Envelope(
        run_state={},
        started_by=envelope.started_by if envelope else "",
        finished=True,
        decided=serving.decided,
    )
    await serving.commit(
        tombstone, consume=consume, outcomes=[notice], items=closed.items, status=Status.IDLE
    )
    if old is not None and old.inline is None:
        await serving.io(serving.store.delete_checkpoint, old)
    serving.final_status = Status.IDLE
