"""`/resume`: continue a paused or interrupted conversation, or say why not. A resumed run
is a run like any other: it takes a slot (`admission`) before the thread's lease, and when
none is free it waits in line, without the lease, its person told it is queued. Mixed into
`ConversationRuntime`."""

from __future__ import annotations

import uuid

from bot.runtime.admitting import Admitting, Served
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
    Status.SET_ASIDE: "The saved state was not trustworthy and was set aside; "
    "send a new message to start over.",
    Status.DISCARDED: "An admin discarded this conversation's state; "
    "send a new message to start over.",
}
QUEUED_RESUME = (
    "Queued: I'm busy with other conversations, and will continue it as soon as one is done."
)
ALREADY_QUEUED = "It is queued already: it continues as soon as I'm done with another."
RESTARTING = "I'm restarting, so nothing was resumed; use /resume again in a moment."
RUNNING_NOW = "It is running right now."


class Resuming(Admitting):
    """Mixed into `ConversationRuntime`, which owns what `Admitting` names."""

    async def resume(
        self,
        key: ConversationKey,
        *,
        user: str | None = None,
        reply_to: str | None = None,
        replace: bool = False,
        event_id: str | None = None,
    ) -> list[Outcome]:
        """`/resume`: continue a paused or interrupted conversation, or say why not. Anyone
        who may not act on it gets the same answer whether or not it exists. `reply_to`:
        where to tell the person at once that it is queued (the answer comes at the end,
        after it); with `replace`, that replaces the message the request came from.
        `event_id` names the request (Slack's ids for it; None: one nobody delivers again)."""
        found = await self.io(self.store.get, key)
        if found is None and user is not None and await self._expired_for(key, user):
            probe = event_id or f"probe:resume:{user}:{uuid.uuid4().hex}"
            kept = await self._keep_probe(key, user, "resume", event_id=probe, take=True)
            if kept is Kept.KEPT:
                await self.serve(key)  # the thread is told
            return [StatusReply(key=key, text=EXPIRED_RESUME)]
        if found is None or (user is not None and not self.may_act(found, user)):
            return [StatusReply(key=key, text=NEUTRAL)]
        if found.status in NOTHING_TO_RESUME:  # no slot to wait for: nothing would run
            return [StatusReply(key=key, text=NOTHING_TO_RESUME[found.status])]
        person = user or found.run_by
        slot = None if self.draining else self.admission.try_take(person)
        if slot is None:
            if self.draining:
                return [StatusReply(key=key, text=RESTARTING)]
            if self.admission.waits(key):  # its messages wait already: that waiter serves it
                return [StatusReply(key=key, text=ALREADY_QUEUED)]
            # Told before it waits (the request is acknowledged already): the answer at the
            # end comes after this, never before, when both replace the same message.
            queued = StatusReply(key=key, text=QUEUED_RESUME, reply_to=reply_to, replaces=replace)
            await self.emit([queued])
            slot = await self.admission.take(key, person)
            if slot is None:  # the replica began stopping meanwhile
                return [StatusReply(key=key, text=RESTARTING)]
        with slot:  # the lease only now: nobody waits on a thread this holds
            served = await self._resume_under_slot(key)
        if isinstance(served, StatusReply):
            return [served]
        outcomes = served.outcomes
        if served.yielded:  # messages came meanwhile and others wait: back in line
            outcomes += await self.serve_when_admitted(key, person)
        return outcomes

    async def _resume_under_slot(self, key: ConversationKey) -> Served | StatusReply:
        try:
            lease, record = await self.io(
                self.store.acquire, key, new_owner(self.process), create=False
            )
        except LeaseBusy:
            return StatusReply(key=key, text=RUNNING_NOW)
        except NotFound:
            return StatusReply(key=key, text=NEUTRAL)
        if record.status in (Status.RUNNING, Status.INTERRUPTED):
            return await self.serve_under_lease(lease, record)
        if record.status is Status.AWAITING_APPROVAL:
            return await self.serve_under_lease(lease, record, remind=True)
        await self.io(self.store.release, lease, touch=False)
        why = NOTHING_TO_RESUME.get(record.status, "There is nothing to resume.")
        return StatusReply(key=key, text=why)
