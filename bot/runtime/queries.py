"""What the Slack layer and operators may ask of the runtime without serving a thread:
who may act on a conversation, conversations and counts, verdicts, health, and the
approvals that wait on a person.

The approvals a surface lists (Slack's Home tab): the person who started the run may
decide its calls, and approvers (`BOT_APPROVERS`) any of the workspace's. Bounded: one
index query (a few capped pages for approvers; `Store.list_waiting_in`) and one checkpoint
read per conversation listed, at most `WAITING_LISTED` of them. A conversation that has
just begun waiting may be named (`including`): read by its key, it is listed even before
the index shows it (DynamoDB's indexes are eventually consistent)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta

from bot.runtime.envelope import AwaitingCall, Envelope
from bot.settings import RuntimeSettings
from storage import (
    CheckpointError,
    Conversation,
    ConversationKey,
    FeedbackTally,
    PersonKey,
    Status,
    Store,
    Verdict,
)
from storage.calls import StorageCalls

log = logging.getLogger(__name__)
PAUSED = (Status.AWAITING_APPROVAL, Status.INTERRUPTED, Status.SET_ASIDE)
LISTED = 20  # paused threads `/resume` lists (the most recently active)
PROBE = ConversationKey(team="healthz", channel="healthz", thread_ts="0")  # never stored
WAITING_LISTED = 10


@dataclass(frozen=True)
class Waiting:
    """A conversation awaiting a decision on `calls`, at checkpoint `version` (what a
    decision names, as the thread's own request does)."""

    record: Conversation
    calls: list[AwaitingCall]
    version: int
    requested_by: str


class Queries:
    def __init__(
        self, store: Store, storage_calls: StorageCalls, settings: RuntimeSettings
    ) -> None:
        self.store = store
        self.storage_calls = storage_calls
        self.settings = settings

    def may_act(self, record: Conversation, user: str) -> bool:
        """The people who may act on a conversation: those who wrote in it (its starter
        included), approvers and admins."""
        settings = self.settings
        return user in record.participants or user in settings.approvers | settings.admins

    def may_stop(self, record: Conversation, user: str) -> bool:
        """Who may stop a run: the person who started it, approvers (who may decide its
        calls) and admins. Its starter is `run_by` as the thread's holder wrote it (when the
        run began, and with each checkpoint): never whoever was kept, or took the lease,
        last, such as someone whose reply was kept while the run waited. (A record written
        before runs were attributed: its participants.)"""
        settings = self.settings
        if user in settings.approvers | settings.admins:
            return True
        return user == record.run_by if record.run_by else user in record.participants

    async def conversation(self, key: ConversationKey) -> Conversation | None:
        return await self.storage_calls(self.store.get, key)

    async def paused_in(
        self,
        team: str,
        channel: str,
        user: str,
        *,
        enterprise: str | None = None,
        limit: int = LISTED,
    ) -> list[Conversation]:
        """Conversations of one channel, awaiting approval or interrupted, that `user` may
        act on, most recently active first: those they wrote in, or, for approvers and
        admins, every one of the channel. One bounded query of that channel's paused
        threads (`Store.list_paused_in`), whatever the rest of the store holds."""
        settings = self.settings
        everyone = user in settings.approvers | settings.admins
        records = await self.storage_calls(
            self.store.list_paused_in,
            team,
            channel,
            enterprise=enterprise,
            participant=None if everyone else user,
            limit=limit,
        )
        return [r for r in records if self.may_act(r, user)]

    @property
    def lease_seconds(self) -> float:
        """How long a thread's lease lasts: a dead holder's threads resume after it."""
        return self.store.lease_duration.total_seconds()

    async def counts(self) -> dict[Status, int]:
        return await self.storage_calls(self.store.count_by_status)

    async def feedback_totals(self) -> FeedbackTally:
        return await self.storage_calls(self.store.count_feedback)

    async def record_feedback(
        self, key: ConversationKey, answer: str, user: str, verdict: Verdict
    ) -> FeedbackTally | None:
        """Someone's verdict on an answer (anyone who can see it may give one); None when
        the conversation is gone."""
        return await self.storage_calls(self.store.record_feedback, key, answer, user, verdict)

    async def oldest(self, status: Status) -> Conversation | None:
        found = await self.storage_calls(self.store.list_by_status, status, limit=1)
        return found[0] if found else None

    async def healthy(self) -> bool:
        """Storage answers (a read of a record that does not exist)."""
        try:
            await asyncio.wait_for(self.storage_calls.once(self.store.get, PROBE), timeout=5)
        except Exception:
            log.warning("health check: storage unavailable", exc_info=True)
            return False
        return True

    async def stale(self, older_than: timedelta, *, limit: int = 500) -> list[Conversation]:
        """Paused, interrupted or set-aside conversations idle for longer than `older_than`."""
        found: list[Conversation] = []
        for status in PAUSED:
            found += await self.storage_calls(
                self.store.list_by_status, status, idle_for=older_than, limit=limit
            )
        return found

    async def waiting_for(
        self, person: PersonKey, including: Collection[ConversationKey] = ()
    ) -> list[Waiting]:
        """What `person` may decide, the most recently waiting first; `including`: conversations
        that began waiting just now, listed when the person may decide them, whether or not the
        index shows them yet."""
        approver = person.user in self.settings.approvers
        if approver:
            records = await self.storage_calls(
                self.store.list_waiting_in,
                person.team,
                enterprise=person.enterprise,
                limit=WAITING_LISTED,
            )
        else:
            records = await self.storage_calls(
                self.store.list_waiting_on,
                person.team,
                person.user,
                enterprise=person.enterprise,
                limit=WAITING_LISTED,
            )
        listed = {record.key for record in records}
        missing = [key for key in including if key not in listed]
        fresh = await asyncio.gather(*(self.storage_calls(self.store.get, key) for key in missing))
        new = [
            record
            for record in fresh
            if record is not None
            and record.status is Status.AWAITING_APPROVAL
            and PersonKey.of(record.key, person.user) == person
            and (approver or record.waiting_on == person.user)
        ]
        found = await asyncio.gather(
            *(self._calls(record) for record in [*new, *records][:WAITING_LISTED])
        )
        return [waiting for waiting in found if waiting is not None]

    async def _calls(self, record: Conversation) -> Waiting | None:
        """The calls a person must decide, from the checkpoint the listing names (None: there
        is none to decide any more, or it cannot be read: the thread says so itself)."""
        if record.checkpoint is None:
            return None
        try:
            document = await self.storage_calls(self.store.load_checkpoint, record.checkpoint)
            envelope = Envelope.model_validate(document)
        except (CheckpointError, ValueError):
            log.info("%s: its checkpoint could not be read for the listing", record.key)
            return None
        if not envelope.runnable or not envelope.humans:
            return None
        return Waiting(record, envelope.humans, record.checkpoint.version, envelope.started_by)
