"""Requests to stop a run (the Stop control, Slack's stop, or the reply `stop`): kept in the
thread's inbox, flagged on the record in the same write, for whoever serves the thread to
apply (`applying_stops`). Honoured for the person who started the run (`run_by`, as the thread's
holder wrote it: never whoever was kept or took the lease last), approvers and admins;
refused privately to anyone else. Each is keyed by the id of the request that carried it
(Slack's), so that a delivery Slack repeats is a duplicate, never a second stop; and none
is counted against, or refused at, the thread's backlog cap."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.runtime.approvals import reply_words
from bot.runtime.context_source import SharedFile
from bot.runtime.envelope import StopRequest, payload_text
from bot.runtime.intake import Intake, Kept
from bot.runtime.outcomes import Refused
from bot.runtime.queries import Queries
from bot.runtime.runtime_parts import RuntimeParts
from storage import Conversation, ConversationKey, Status

# What a stop may apply to besides a held thread: a run paused or interrupted.
STOPPABLE = (Status.RUNNING, Status.AWAITING_APPROVAL, Status.INTERRUPTED)
NOT_YOURS_TO_STOP = "Only the person who started this run, an approver or an admin can stop it."
EXPIRED_STOP = "Nothing is running there: this conversation's saved state expired (see the thread)."
STOP_WORDS = frozenset({"stop", "stop it", "cancel that", "abort"})


def is_stop_word(text: str) -> bool:
    """A reply that asks the run in progress to stop (while nothing runs, it is a message)."""
    return reply_words(text) in STOP_WORDS


@dataclass(frozen=True)
class Stopping:
    accepted: bool
    text: str
    refused: bool = False  # the person may not stop this run (nothing was asked)
    duplicate: bool = False  # a delivery of a stop kept before: its first was answered
    serve: bool = False  # the write took the thread: serve it next (`keep_stop`)


class StopInbox:
    def __init__(self, parts: RuntimeParts, intake: Intake, queries: Queries) -> None:
        self.parts = parts
        self.store = parts.store
        self.io = parts.io
        self.intake = intake
        self.queries = queries

    async def keep_stop(
        self, key: ConversationKey, user: str, *, event_id: str, reply_to: str | None = None
    ) -> Stopping:
        """`request_stop`'s durable half, for a caller that acknowledges a request in
        between: the stop is kept (or refused) when this returns; `Stopping.serve` says the
        write took the thread (a paused run, or an expired thread to be told), for the caller
        to `serve` next. `event_id` is the request's own (Slack's ids for it): another
        delivery of it is a duplicate (`Stopping.duplicate`), which stops nothing."""
        record = await self.io(self.store.get, key)
        if record is None:
            if await self.intake.expired_for(key, user):
                kept = await self.intake.keep_probe(key, user, "stop", event_id=event_id, take=True)
                return Stopping(False, EXPIRED_STOP, serve=kept is Kept.KEPT)
            return Stopping(False, "There is nothing of yours running there.")
        stopping = await self._stop(record, user, event_id=event_id, reply_to=reply_to)
        if stopping.accepted and self.intake.took(key):  # the run was paused: stop it now
            return Stopping(True, stopping.text, serve=True)
        return stopping

    async def reply(
        self,
        key: ConversationKey,
        *,
        event_id: str,
        user: str,
        text: str,
        files: Sequence[SharedFile] = (),
    ) -> Kept | None:
        """A reply that is a stop word (kept under the message's own `event_id`, so that a
        delivery of it again is a duplicate whether it was kept as a stop or as a message):
        a request to the run in progress, refused privately to whoever may not stop it (and
        then neither kept nor given to the model); None when nothing runs there, and it is
        an ordinary message (and so is any other reply)."""
        if files or not is_stop_word(text):
            return None
        record = await self.io(self.store.get, key)
        if record is None:
            if await self.intake.expired_for(key, user):  # the thread is told, not the model
                return await self.intake.keep_probe(key, user, "stop", event_id=event_id, take=True)
            return None
        stopping = await self._stop(record, user, event_id=event_id)
        if stopping.accepted:  # served by whoever holds the thread (us, if we took it)
            return Kept.KEPT if self.intake.took(key) else Kept.STOPPING
        if stopping.duplicate:
            return Kept.DUPLICATE
        if stopping.refused:
            text = f"{stopping.text} Your `stop` was not passed on to it."
            self.parts.emit_later([Refused(key=key, text=text, user=user)])
            return Kept.STOP_REFUSED
        return None

    async def _stop(
        self,
        record: Conversation,
        user: str,
        *,
        event_id: str,
        reply_to: str | None = None,
    ) -> Stopping:
        """Keep the request in the thread's inbox, flagged on the record in the same write
        (see `applying_stops`); this process's own serve of the thread learns it at once, another
        replica's within `STOP_POLL`. When the thread was free (a run paused for approval)
        the write takes it, for the caller to serve. Never refused at the backlog cap: a
        full thread is the one whose run most needs stopping."""
        key = record.key
        cutoff = self.store.takeover_cutoff(self.store.clock())
        if not (record.leased(cutoff) or record.status in STOPPABLE):
            return Stopping(False, "Nothing is running there right now.")
        if not self.queries.may_stop(record, user):
            return Stopping(False, NOT_YOURS_TO_STOP, refused=True)
        payload = payload_text(StopRequest(user=user, reply_to=reply_to))
        kept = await self.intake.keep(
            key, event_id, payload, create=False, user=None, take=True, stop_by=user
        )
        if kept is Kept.NOT_OURS:
            return Stopping(False, "Nothing is running there right now.")
        if kept is Kept.DUPLICATE:  # delivered again: kept before (as a stop, or a message)
            return Stopping(False, "Your stop was received already.", duplicate=True)
        self.intake.ask_live_to_stop(key, user)  # after the keep: the stop it applies consumes it
        return Stopping(True, "Stopping it now.")
