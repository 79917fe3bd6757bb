"""Keeping a request in its thread's inbox: one durable write, acknowledged only after it.

A message or a decision is kept (deduplicated by its event id); the write may take the
thread when it is free, for `serve` to go on with at once. A request about a thread whose
state expired is kept as a probe, which brings the thread back to be told (`expiry`).
Mixed into `ConversationRuntime`, like `queries`."""

from __future__ import annotations

import uuid
from abc import abstractmethod
from collections.abc import Sequence
from enum import StrEnum

from bot.runtime.context_source import SharedFile
from bot.runtime.envelope import DecisionRequest, Probe, UserMessage, payload_text
from bot.runtime.keeps_first import KeepsFirst
from bot.runtime.lease_owner import new_owner
from bot.runtime.not_taken import NotTaken
from bot.runtime.queries import Queries
from bot.runtime.replies import is_stop_word
from bot.runtime.text import clean_text
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


class Keeping(Queries):
    """Mixed into `ConversationRuntime`, which owns these:"""

    process: str
    draining: bool
    keeps: KeepsFirst
    not_taken: NotTaken
    # Threads taken by the write that kept their message, for `serve` to use at once.
    _taken: dict[ConversationKey, tuple[Lease, Conversation]]
    _requesters: dict[ConversationKey, str]  # whose slot a serve takes

    @abstractmethod
    async def _ask_stop(self, key: ConversationKey, user: str, event_id: str) -> Kept | None:
        """The reply `stop` (see `stop_requests`)."""

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
        `viewing`, what its author was looking at (given to the model with it)."""
        if is_stop_word(text) and not files:
            stopping = await self._ask_stop(key, user, event_id)
            if stopping is not None:
                return stopping
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
        kept = await self._keep(
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
        `_keep`); it never creates a conversation. `event_id` is the click's own (Slack's
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
        return await self._keep(key, event_id, payload, create=False, user=None, take=take)

    def opens_conversation(self, key: ConversationKey) -> bool:
        """The message just kept took the thread, and nothing has happened in its
        conversation yet: it is the conversation's first request."""
        taken = self._taken.get(key)
        return taken is not None and taken[1].next_seq == 0 and taken[1].checkpoint is None

    async def _keep(
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
            with self.keeps.keeping():
                kept = await self.io.urgent(
                    self.store.keep,
                    key,
                    event_id,
                    payload,
                    create=create,
                    participant=user or None,
                    owner=new_owner(self.process) if take and not self.draining else None,
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
                self.not_taken.add(key, refusal, named=kept.named)
            return Kept.NOT_TAKEN
        return Kept.KEPT if kept.kept else Kept.DUPLICATE

    async def _keep_probe(
        self, key: ConversationKey, user: str, reason: str, *, event_id: str, take: bool
    ) -> Kept:
        """A request about a thread whose state expired: it brings the thread back, to be
        told (see `expiry`). Kept under the request's own `event_id`, as the request itself
        would have been, so that another delivery of it is a duplicate either way."""
        payload = payload_text(Probe(user=user, reason=reason))
        return await self._keep(key, event_id, payload, create=False, user=None, take=take)

    async def _expired_for(self, key: ConversationKey, user: str) -> bool:
        """The conversation's state expired, and `user` may act on it."""
        gone = await self.io(self.store.expired_record, key)
        return gone is not None and self.may_act(gone, user)
