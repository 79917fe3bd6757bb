"""`/resume`: continue a paused or interrupted conversation, or say why not. Mixed into
`ConversationRuntime`."""

from __future__ import annotations

from bot.runtime.admitting import Admitting
from bot.runtime.keeping import Kept
from bot.runtime.lease_owner import new_owner
from bot.runtime.outcomes import Outcome, StatusReply
from storage import ConversationKey, LeaseBusy, NotFound, Status

NEUTRAL = (
    "I can't resume that thread: there is nothing of mine to resume there, or it is not one "
    "you took part in."
)
EXPIRED_RESUME = (
    "There is nothing to resume: this conversation's saved state expired, and nothing that "
    "was waiting was run (see the thread). Send a new message there to start again."
)
# Why a conversation that was found has nothing to resume, by its status.
NOTHING_TO_RESUME = {
    Status.IDLE: "There is nothing to resume: the last run finished.",
    Status.NEEDS_RESTART: "The saved state was not trustworthy and was set aside; "
    "send a new message to start over.",
    Status.DISCARDED: "An admin discarded this conversation's state; "
    "send a new message to start over.",
}


class Resuming(Admitting):
    """Mixed into `ConversationRuntime`, which owns what `Admitting` names."""

    async def resume(self, key: ConversationKey, *, user: str | None = None) -> list[Outcome]:
        """`/resume`: continue a paused or interrupted conversation, or say why not. Anyone
        who may not act on it gets the same answer whether or not it exists."""
        found = await self.io(self.store.get, key)
        if found is None and user is not None and await self._expired_for(key, user):
            if await self._keep_probe(key, user, "resume", take=True) is Kept.KEPT:
                await self.serve(key)  # the thread is told
            return [StatusReply(key=key, text=EXPIRED_RESUME)]
        if found is None or (user is not None and not self.may_act(found, user)):
            return [StatusReply(key=key, text=NEUTRAL)]
        try:
            lease, record = await self.io(
                self.store.acquire, key, new_owner(self.process), create=False
            )
        except LeaseBusy:
            return [StatusReply(key=key, text="It is running right now.")]
        except NotFound:
            return [StatusReply(key=key, text=NEUTRAL)]
        if record.status in (Status.RUNNING, Status.INTERRUPTED):
            return (await self.serve_under_lease(lease, record)).outcomes
        if record.status is Status.AWAITING_APPROVAL:
            return (await self.serve_under_lease(lease, record, remind=True)).outcomes
        await self.io(self.store.release, lease, touch=False)
        why = NOTHING_TO_RESUME.get(record.status, "There is nothing to resume.")
        return [StatusReply(key=key, text=why)]
