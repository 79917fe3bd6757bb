"""Where requests come in: each is kept in its thread's inbox by one durable write,
acknowledged only after it; and which threads this replica holds, and for whom.

A message or a decision is kept (deduplicated by its event id); the write may take the
thread when it is free, for the scheduler's `serve` to go on with at once. A request about
a thread whose state expired is kept as a probe, which brings the thread back to be told
(`expiry`). `Intake` alone records the threads this replica holds: taken by a keep and not
yet served, served now (a stop reaches that serve at once), and whose message each serve
answers (whose run slot it takes).

Requests to stop a run (the Stop control, Slack's stop, or the reply `stop`): kept in the
thread's inbox, flagged on the record in the same write, for whoever serves the thread to
apply (`applying_stops`). Honoured for the person who started the run (`run_by`, as the thread's
holder wrote it: never whoever was kept or took the lease last), approvers and admins;
refused privately to anyone else. Each is keyed by the id of the request that carried it
(Slack's), so that a delivery Slack repeats is a duplicate, never a second stop; and none
is counted against, or refused at, the thread's backlog cap."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bot.runtime.acks_first import AcksFirst
from bot.runtime.approvals import reply_words
from bot.runtime.context_source import SharedFile
from bot.runtime.envelope import (
    DecisionRequest,
    Probe,
    StopRequest,
    UserMessage,
    clean_text,
    payload_text,
)
from bot.runtime.lease_owner import new_owner
from bot.runtime.outcomes import Refused
from bot.runtime.queries import Queries
from bot.runtime.runtime_parts import RuntimeParts
from bot.runtime.serving import Serving
from bot.runtime.viewing import Viewing
from storage import Conversation, ConversationKey, Lease, NotFound, Refusal, Status
from storage.models import REFUSAL_TEXT

REQUESTERS_KEPT = 10_000  # who sent the message kept last, per thread, until it is served
# What a stop may apply to besides a held thread: a run paused or interrupted.
STOPPABLE = (Status.RUNNING, Status.AWAITING_APPROVAL, Status.INTERRUPTED)
NOT_YOURS_TO_STOP = "Only the person who started this run, an approver or an admin can stop it."
EXPIRED_STOP = "Nothing is running there: this conversation's saved state expired (see the thread)."
STOP_WORDS = frozenset({"stop", "stop it", "cancel that", "abort"})


class Kept(StrEnum):
    KEPT = "kept"
    DUPLICATE = "duplicate"
    NOT_OURS = "not_ours"  # a reply in a thread the bot is not part of
    STOPPING = "stopping"  # `stop` while a run was going: it asked the run to stop
    STOP_REFUSED = "stop_refused"  # `stop` from someone who may not: answered privately
    NOT_TAKEN = "not_taken"  # the thread's backlog is full: the thread is told


class Intake:
    def __init__(self, parts: RuntimeParts, queries: Queries, acks_first: AcksFirst) -> None:
        self.parts = parts
        self.store = parts.store
        self.storage_calls = parts.storage_calls
        self.queries = queries
        self.acks_first = acks_first
        # Threads taken by the write that kept their message, for `serve` to use at once.
        self._taken: dict[ConversationKey, tuple[Lease, Conversation]] = {}
        self._requesters: dict[ConversationKey, str] = {}  # whose slot a serve takes
        self._live: dict[ConversationKey, Serving] = {}  # threads this process serves now
        self.serving: set[asyncio.Task[Any]] = set()  # their tasks, which `drain` waits for
        self.stops = StopInbox(parts, self, queries)

    # -- the threads this replica holds ---------------------------------------------------

    def took(self, key: ConversationKey) -> bool:
        """The write that kept a request just now took the thread (not served yet)."""
        return key in self._taken

    def taken(self, key: ConversationKey) -> tuple[Lease, Conversation] | None:
        """The thread its keep took, handed to the serve that goes on with it (once)."""
        return self._taken.pop(key, None)

    def requester(self, key: ConversationKey) -> str | None:
        """Who sent the message kept last, handed to the serve that answers it (once)."""
        return self._requesters.pop(key, None)

    def serves(self, key: ConversationKey) -> bool:
        return key in self._live

    @contextlib.contextmanager
    def live(self, serving: Serving) -> Iterator[None]:
        """Around a serve of this process: a stop reaches it, `drain` waits for it."""
        task = asyncio.current_task()
        if task is not None:
            self.serving.add(task)
        self._live[serving.key] = serving
        try:
            yield
        finally:
            if self._live.get(serving.key) is serving:
                del self._live[serving.key]
            if task is not None:
                self.serving.discard(task)

    def ask_live_to_stop(self, key: ConversationKey, user: str) -> None:
        """This process's own serve of the thread, if any, learns of the stop at once."""
        serving = self._live.get(key)
        if serving is not None:
            serving.ask_stop(user)

    # -- keeping requests -----------------------------------------------------------------

    async def keep_message(
        self,
        key: ConversationKey,
        *,
        event_id: str,
        user: str,
        text: str,
        ts: str | None = None,
        create: bool = True,
        take: bool = False,
        files: Sequence[SharedFile] = (),
        viewing: Viewing | None = None,
    ) -> Kept:
        """Keep a user's message durably in its thread's inbox (deduplicated by event id).
                Without `create`, only a thread the bot is already part of takes it. With `take`,
                the same write takes the thread when it is free, for `serve` to go on with. `files`
                describe what was shared with it (read later, when the model is given it);
                `viewing`, what its author was looking at (given to the model with it). The reply
        `stop` is the stop inbox's (`StopInbox.reply`), asked first."""
        stop = await self.stops.reply(key, event_id=event_id, user=user, text=text, files=files)
        if stop is not None:
            return stop
        message = UserMessage(
            user=user,
            text=clean_text(text),
            ts=ts,
            files=list(files),
            addressed=create,
            viewing=viewing,
        )
        payload = payload_text(message)
        refusal = Refusal(
            event_id=event_id, user=user, text=message.text[:REFUSAL_TEXT], at=self.store.clock()
        )
        kept = await self.keep(
            key, event_id, payload, create=create, user=user, take=take, refusal=refusal
        )
        if kept is Kept.KEPT:
            if len(self._requesters) >= REQUESTERS_KEPT:  # kept here, served elsewhere
                self._requesters.pop(next(iter(self._requesters)))
            self._requesters[key] = user
        return kept

    async def keep_decision(
        self,
        key: ConversationKey,
        *,
        event_id: str,
        call_id: str,
        approve: bool,
        user: str,
        checkpoint_version: int,
        reason: str | None = None,
        request_message: str | None = None,
        reply_to: str | None = None,
        take: bool = False,
    ) -> Kept:
        """Keep a click on Approve or Reject durably (never refused at the backlog cap: see
        `keep`); it never creates a conversation. `event_id` is the click's own (Slack's
        ids for it), so that another delivery of it is a duplicate."""
        payload = payload_text(
            DecisionRequest(
                call_id=call_id,
                approve=approve,
                user=user,
                version=checkpoint_version,
                reason=clean_text(reason) if reason else None,
                request_message=request_message,
                reply_to=reply_to,
            )
        )
        return await self.keep(key, event_id, payload, create=False, user=None, take=take)

    def opens_conversation(self, key: ConversationKey) -> bool:
        """The message just kept took the thread, and nothing has happened in its
        conversation yet: it is the conversation's first request."""
        taken = self._taken.get(key)
        return taken is not None and taken[1].next_seq == 0 and taken[1].checkpoint is None

    async def keep(
        self,
        key: ConversationKey,
        event_id: str,
        payload: str,
        *,
        create: bool,
        user: str | None,
        take: bool,
        stop_by: str | None = None,
        refusal: Refusal | None = None,
    ) -> Kept:
        """Keep one inbox entry; `refusal` says what to record, and tell the thread, if the
        backlog is full: only a message has one. A request about the run (a stop, a
        decision, a probe) is never refused at the backlog cap, nor counted in it: the
        thread's queued messages must not keep a run from being stopped or decided."""
        try:
            with self.acks_first.keeping():
                kept = await self.storage_calls.urgent(
                    self.store.keep,
                    key,
                    event_id,
                    payload,
                    create=create,
                    participant=user or None,
                    owner=new_owner(self.parts.process)
                    if take and not self.parts.draining
                    else None,
                    token=uuid.uuid4().hex,
                    stop_by=stop_by,
                    refusal_text=refusal.text if refusal else "",
                    capped=refusal is not None,
                )
        except NotFound:
            return Kept.NOT_OURS
        if kept.lease is not None and kept.record is not None:
            self._taken[key] = (kept.lease, kept.record)
        if kept.refused:
            if refusal is not None:
                self.parts.refusals.add(key, refusal, named=kept.named)
            return Kept.NOT_TAKEN
        return Kept.KEPT if kept.kept else Kept.DUPLICATE

    async def keep_probe(
        self, key: ConversationKey, user: str, reason: str, *, event_id: str, take: bool
    ) -> Kept:
        """A request about a thread whose state expired: it brings the thread back, to be
        told (see `expiry`). Kept under the request's own `event_id`, as the request itself
        would have been, so that another delivery of it is a duplicate either way."""
        payload = payload_text(Probe(user=user, reason=reason))
        return await self.keep(key, event_id, payload, create=False, user=None, take=take)

    async def expired_for(self, key: ConversationKey, user: str) -> bool:
        """The conversation's state expired, and `user` may act on it."""
        gone = await self.storage_calls(self.store.expired_record, key)
        return gone is not None and self.queries.may_act(gone, user)


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
    """Requests to stop a run, kept through the intake that owns it."""

    def __init__(self, parts: RuntimeParts, intake: Intake, queries: Queries) -> None:
        self.parts = parts
        self.store = parts.store
        self.storage_calls = parts.storage_calls
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
        record = await self.storage_calls(self.store.get, key)
        if record is None:
            if await self.intake.expired_for(key, user):
                kept = await self.intake.keep_probe(key, user, "stop", event_id=event_id, take=True)
                return Stopping(False, EXPIRED_STOP, serve=kept is Kept.KEPT)
            await self._answered_unkept(key, event_id)
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
        record = await self.storage_calls(self.store.get, key)
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
            await self._answered_unkept(key, event_id)
            return Stopping(False, "Nothing is running there right now.")
        if not self.queries.may_stop(record, user):
            return Stopping(False, NOT_YOURS_TO_STOP, refused=True)
        if await self.storage_calls(self.store.event_claimed, _unkept(key, event_id)):
            return Stopping(False, "Your stop was received already.", duplicate=True)
        payload = payload_text(StopRequest(user=user, reply_to=reply_to))
        kept = await self.intake.keep(
            key, event_id, payload, create=False, user=None, take=True, stop_by=user
        )
        if kept is Kept.NOT_OURS:
            await self._answered_unkept(key, event_id)
            return Stopping(False, "Nothing is running there right now.")
        if kept is Kept.DUPLICATE:  # delivered again: kept before (as a stop, or a message)
            return Stopping(False, "Your stop was received already.", duplicate=True)
        self.intake.ask_live_to_stop(key, user)  # after the keep: the stop it applies consumes it
        return Stopping(True, "Stopping it now.")

    async def _answered_unkept(self, key: ConversationKey, event_id: str) -> None:
        """A stop answered that nothing runs is kept nowhere, so its event is claimed: Slack
        delivering it again while a later run goes on is the same request, which stops
        nothing (the keep's own claim covers only stops that were kept)."""
        await self.storage_calls(self.store.claim_event, _unkept(key, event_id))


def _unkept(key: ConversationKey, event_id: str) -> str:
    return f"unkept-stop:{key}|{event_id}"
