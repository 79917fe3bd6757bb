"""The approvals that wait on a person, with the calls each waits for, for a surface that
lists them (Slack's Home tab): the person who started the run may decide its calls, and
approvers (`BOT_APPROVERS`) any of the workspace's. Bounded: one index query (a few capped
pages for approvers; `Store.list_waiting_in`) and one checkpoint read per conversation
listed, at most `LISTED` of them. A conversation that has just begun waiting may be named
(`including`): read by its key, it is listed even before the index shows it (DynamoDB's
indexes are eventually consistent)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from bot.runtime.envelope import AwaitingCall, Envelope
from bot.settings import RuntimeSettings
from storage import CheckpointError, Conversation, ConversationKey, PersonKey, Status, Store
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


async def waiting_for(
    rt: WaitingSources, person: PersonKey, including: Collection[ConversationKey] = ()
) -> list[Waiting]:
    """What `person` may decide, the most recently waiting first; `including`: conversations
    that began waiting just now, listed when the person may decide them, whether or not the
    index shows them yet."""
    approver = person.user in rt.settings.approvers
    if approver:
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
    listed = {record.key for record in records}
    missing = [key for key in including if key not in listed]
    fresh = await asyncio.gather(*(rt.io(rt.store.get, key) for key in missing))
    new = [
        record
        for record in fresh
        if record is not None
        and record.status is Status.AWAITING_APPROVAL
        and PersonKey.of(record.key, person.user) == person
        and (approver or record.waiting_on == person.user)
    ]
    found = await asyncio.gather(*(_calls(rt, record) for record in [*new, *records][:LISTED]))
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
