"""Where requests come in: each is kept in its thread's inbox by one durable write,
acknowledged only after it; and which threads this replica holds, and for whom.

A message or a decision is kept (deduplicated by its event id); the write may take the
thread when it is free, for the scheduler's `serve` to go on with at once. A request about
a thread whose state expired is kept as a probe, which brings the thread back to be told
(`expiry`). `Intake` alone records the threads this replica holds: taken by a keep and not
yet served, served now (a stop reaches that serve at once), and whose message each serve
answers (whose run slot it takes)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator, Sequence
from enum import StrEnum
from typing import Any

from bot.runtime.acks_first import AcksFirst
from bot.runtime.context_source import SharedFile
from bot.runtime.envelope import DecisionRequest, Probe, UserMessage, clean_text, payload_text
from bot.runtime.lease_owner import new_owner
from bot.runtime.queries import Queries
from bot.runtime.runtime_parts import RuntimeParts
from bot.runtime.serving import Serving
from bot.runtime.viewing import Viewing
from storage import Conversation, ConversationKey, Lease, NotFound, Refusal
from storage.models import REFUSAL_TEXT

REQUESTERS_KEPT = 10_000  # who sent the message kept last, per thread, until it is served


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
        self.io = parts.io
        self.queries = queries
        self.acks_first = acks_first
        # Threads taken by the write that kept their message, for `serve` to use at once.
        self._taken: dict[ConversationKey, tuple[Lease, Conversation]] = {}
        self._requesters: dict[ConversationKey, str] = {}  # whose slot a serve takes
        self._live: dict[ConversationKey, Serving] = {}  # threads this process serves now
        self.serving: set[asyncio.Task[Any]] = set()  # their tasks, which `drain` waits for

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
                kept = await self.io.urgent(
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
        gone = await self.io(self.store.expired_record, key)
        return gone is not None and self.queries.may_act(gone, user)
