"""The inbox part of the `Store` contract: what a thread was sent, kept durably before the
bot acks it (deduplicated by event id), read back oldest first by whoever holds the thread,
and consumed by the commit of the turn that served it (`Commit.consume`, see `base`)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from storage.models import ConversationKey, InboxEntry
from storage.writes import KeepRequest, KeepResult


class InboxPart(Protocol):
    """A backend's inbox: what `ConversationInbox` hands each call to, with every argument."""

    def keep(self, request: KeepRequest) -> KeepResult: ...

    def read(
        self, key: ConversationKey, generation: int | None, limit: int | None
    ) -> list[InboxEntry]: ...

    def refusals_told(
        self, key: ConversationKey, event_ids: Sequence[str], counted: int
    ) -> None: ...


class ConversationInbox:
    """Keeping messages and stop requests, telling refusals, reading the backlog."""

    keeps: InboxPart
    translating: AbstractContextManager[None]

    def keep(
        self,
        key: ConversationKey,
        event_id: str,
        payload: str,
        *,
        create: bool = True,
        participant: str | None = None,
        owner: str | None = None,
        token: str | None = None,
        stop_by: str | None = None,
        refusal_text: str = "",
        capped: bool = True,
    ) -> KeepResult:
        """Keep a user message durably, claiming its event id (per conversation, for at least
        `claim_ttl`: longer than Slack retries an event) in the same atomic write; marks the
        conversation `running` (it has work), bumps `inbox_seq` and adds `participant` to its
        participants. A keep never changes who started the run (`run_by`: the holder's
        commits write it), except that a conversation without one (at its first message)
        names `participant`. With `owner`, the same write also takes the lease if it is free
        (`KeepResult.lease`), and the record comes back with its inbox, so that serving the
        message needs no further read. Nothing is written when the event id was claimed
        before (`KeepResult.kept` is False), nor when `backlog_limit` messages are queued already
        (`KeepResult.refused`; the event is claimed all the same, and a duplicate of a message
        kept is a duplicate, not refused). Without `capped`, the entry is a request about the
        run rather than a message (a stop, a decision): it is neither refused at the cap nor
        counted in it. Without `create`, only an existing conversation takes it;
        otherwise raises `NotFound` (and claims nothing). A conversation whose state expired
        but whose tombstone lasts is brought back, with or without `create`, as a new
        generation (none of the old rows is seen) that keeps its participants and says what
        expired (`Conversation.expired_from`, until a commit clears it). Retrying with the
        same `token` after an unanswered attempt is not mistaken for a duplicate. The cost of
        one keep does not grow with the backlog. With `stop_by`, the message is a request to
        stop the run: the same write sets `stop_by` on the record, for the holder to see at
        once (`stop_requested`, `renew`); a release or a commit with `clear_stop` removes it,
        and neither can pass over the message itself (it is in the inbox). A refusal is
        recorded on the record in the same write (`Conversation.refused`: `participant` and
        the first `REFUSAL_TEXT` characters of `refusal_text`, for the first
        `REFUSALS_NAMED` untold; later ones only counted, `KeepResult.named` False), and bumps
        `inbox_seq`, so that a holder's release sees it, until `refusals_told`."""
        with self.translating:
            return self.keeps.keep(
                KeepRequest(
                    key,
                    event_id,
                    payload,
                    create=create,
                    participant=participant,
                    owner=owner,
                    token=token,
                    stop_by=stop_by,
                    refusal_text=refusal_text,
                    capped=capped,
                )
            )

    def refusals_told(
        self, key: ConversationKey, event_ids: Sequence[str], counted: int = 0
    ) -> None:
        """The thread was told of these refusals: the named ones (by event id) and `counted`
        of those only counted are no longer untold; a count below `counted` (told twice) is
        left as it is. No lease needed."""
        with self.translating:
            self.keeps.refusals_told(key, event_ids, counted)

    def enqueue(
        self,
        key: ConversationKey,
        event_id: str,
        payload: str,
        *,
        create: bool = True,
        participant: str | None = None,
        token: str | None = None,
    ) -> bool:
        """`keep` without taking the lease; True when kept, False for a duplicate."""
        return self.keep(
            key, event_id, payload, create=create, participant=participant, token=token
        ).kept

    def read_inbox(
        self, key: ConversationKey, generation: int | None = None, limit: int | None = None
    ) -> list[InboxEntry]:
        """Queued messages, oldest first (the oldest `limit` when given; reading them costs
        no more than that however long the backlog). Commits consume them
        (`Commit.consume`). With `generation`, entries left by an earlier, expired record
        are left out."""
        with self.translating:
            return self.keeps.read(key, generation, limit)
