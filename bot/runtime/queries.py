"""What the Slack layer and operators may ask of the runtime without serving a thread:
who may act on a conversation, conversations and counts, verdicts, health."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from bot.settings import RuntimeSettings
from storage import Conversation, ConversationKey, FeedbackTally, Status, Store, Verdict
from storage.calls import StorageCalls

log = logging.getLogger(__name__)
PAUSED = (Status.AWAITING_APPROVAL, Status.INTERRUPTED, Status.SET_ASIDE)
LISTED = 20  # paused threads `/resume` lists (the most recently active)
PROBE = ConversationKey(team="healthz", channel="healthz", thread_ts="0")  # never stored


class Queries:
    """Mixed into `ConversationRuntime`, which owns these:"""

    store: Store
    io: StorageCalls
    settings: RuntimeSettings

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
        return await self.io(self.store.get, key)

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
        records = await self.io(
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
        return await self.io(self.store.count_by_status)

    async def feedback_totals(self) -> FeedbackTally:
        return await self.io(self.store.count_feedback)

    async def record_feedback(
        self, key: ConversationKey, answer: str, user: str, verdict: Verdict
    ) -> FeedbackTally | None:
        """Someone's verdict on an answer (anyone who can see it may give one); None when
        the conversation is gone."""
        return await self.io(self.store.record_feedback, key, answer, user, verdict)

    async def oldest(self, status: Status) -> Conversation | None:
        found = await self.io(self.store.list_by_status, status, limit=1)
        return found[0] if found else None

    async def healthy(self) -> bool:
        """Storage answers (a read of a record that does not exist)."""
        try:
            await asyncio.wait_for(self.io.once(self.store.get, PROBE), timeout=5)
        except Exception:
            log.warning("health check: storage unavailable", exc_info=True)
            return False
        return True

    async def stale(self, older_than: timedelta, *, limit: int = 500) -> list[Conversation]:
        """Paused, interrupted or set-aside conversations idle for longer than `older_than`."""
        found: list[Conversation] = []
        for status in PAUSED:
            found += await self.io(
                self.store.list_by_status, status, idle_for=older_than, limit=limit
            )
        return found
