"""The approvals that wait on a person, with the calls each waits for, for a surface that
lists them (Slack's Home tab): the person who started the run may decide its calls, and
approvers (`BOT_APPROVERS`) any of the workspace's. Bounded: one index query (a few capped
pages for approvers; `Store.list_waiting_in`) and one checkpoint read per conversation
listed, at most `LISTED` of them."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from bot.runtime.envelope import AwaitingCall, Envelope
from bot.settings import RuntimeSettings
from storage import CheckpointError, Conversation, PersonKey, Store
from storage.calls import StorageCalls

log = logging.getLogger(__name__)
LISTED = 10


class WaitingSources(Protocol):
    """What the listing uses of the runtime: who approves, and the storage."""

    @property
    def settings(self) -> RuntimeSettings: ...
    @property
    def store(self) -> Store: ...
    @property
    def io(self) -> StorageCalls: ...


@dataclass(frozen=True)
class Waiting:
    """A conversation awaiting a decision on `calls`, at checkpoint `version` (what a
    decision names, as the thread's own request does)."""

    record: Conversation
    calls: list[AwaitingCall]
    version: int
    requested_by: str


async def waiting_for(rt: WaitingSources, person: PersonKey) -> list[Waiting]:
    """What `person` may decide, the most recently waiting first."""
    if person.user in rt.settings.approvers:
        records = await rt.io(
            rt.store.list_waiting_in, person.team, enterprise=person.enterprise, limit=LISTED
        )
    else:
        records = await rt.io(
            rt.store.list_waiting_on,
            person.team,
            person.user,
            enterprise=person.enterprise,
            limit=LISTED,
        )
    found = await asyncio.gather(*(_calls(rt, record) for record in records))
    return [waiting for waiting in found if waiting is not None]


async def _calls(rt: WaitingSources, record: Conversation) -> Waiting | None:
    """The calls a person must decide, from the checkpoint the listing names (None: there
    is none to decide any more, or it cannot be read: the thread says so itself)."""
    if record.checkpoint is None:
        return None
    try:
        document = await rt.io(rt.store.load_checkpoint, record.checkpoint)
        envelope = Envelope.model_validate(document)
    except (CheckpointError, ValueError):
        log.info("%s: its checkpoint could not be read for the listing", record.key)
        return None
    if not envelope.runnable or not envelope.humans:
        return None
    return Waiting(record, envelope.humans, record.checkpoint.version, envelope.started_by)
