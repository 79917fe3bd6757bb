"""The operational queries of the storage contract: conversations listed and counted
through indexes at bounded cost (by status, workspace, channel, who they wait on), and the
verdicts people give answers."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Protocol

from storage.models import (
    Conversation,
    ConversationKey,
    FeedbackTally,
    Status,
    Verdict,
    place_of,
    team_prefix,
    waitable,
    workspace_of,
)

# The statuses operational queries can find (idle conversations are not indexed).
INDEXED = tuple(status for status in Status if status is not Status.IDLE)
# The statuses `list_paused_in` finds: threads a person can resume.
PAUSED_IN_CHANNEL = (Status.AWAITING_APPROVAL, Status.INTERRUPTED)
PAUSED_PAGES = 4  # `list_paused_in` examines at most this many times its `limit`
WAITING_PAGES = 4  # `list_waiting_in` examines at most this many times its `limit`


class ListingsPart(Protocol):
    """A backend's operational queries: what `ConversationListings` hands each listing to,
    with every argument."""

    def list_by_status(
        self, status: Status, *, idle_for: timedelta | None, limit: int
    ) -> list[Conversation]: ...

    def count_by_status(self) -> dict[Status, int]: ...

    def list_starting(self, prefix: str, *, statuses: Sequence[Status]) -> list[Conversation]:
        """The live conversations in `statuses` whose key starts with `prefix`."""
        ...

    # The listings of one place or workspace get it as a key names it (`place_of`,
    # `workspace_of`), and a `limit` of at least one.

    def list_paused_in(
        self, place: str, *, participant: str | None, limit: int
    ) -> list[Conversation]: ...

    def list_waiting_on(self, workspace: str, user: str, *, limit: int) -> list[Conversation]: ...

    def list_waiting_in(self, workspace: str, *, limit: int) -> list[Conversation]: ...


class FeedbackPart(Protocol):
    """A backend's verdicts on answers, as `ConversationListings` records and counts them."""

    def record(
        self, key: ConversationKey, answer: str, user: str, verdict: Verdict
    ) -> FeedbackTally | None: ...

    def count(self) -> FeedbackTally: ...


class ConversationListings:
    queries: ListingsPart
    feedback: FeedbackPart
    translating: AbstractContextManager[None]

    def list_by_status(
        self, status: Status, *, idle_for: timedelta | None = None, limit: int = 100
    ) -> list[Conversation]:
        """Conversations in `status`, least recently active first, through an index.
        Idle conversations are not indexed: listing them finds nothing."""
        with self.translating:
            return self.queries.list_by_status(status, idle_for=idle_for, limit=limit)

    def count_by_status(self) -> dict[Status, int]:
        with self.translating:
            return self.queries.count_by_status()

    def list_by_team(
        self,
        team: str | None,
        *,
        enterprise: str | None = None,
        statuses: Sequence[Status] = INDEXED,
        limit: int = 1000,
    ) -> list[Conversation]:
        """Conversations in one of `statuses` (never idle) whose key names `team` and
        `enterprise` (None: a key without one); with `team` None, those of every team of
        `enterprise`. Least recently active first. A rare operator query (a workspace that
        uninstalled the app): it may read every conversation in those statuses."""
        if team is None and enterprise is None:
            raise ValueError("list_by_team needs a team or an enterprise")
        wanted = [status for status in statuses if status is not Status.IDLE]
        with self.translating:
            found = self.queries.list_starting(team_prefix(team, enterprise), statuses=wanted)
        mine = [
            r
            for r in found
            if r.key.enterprise == enterprise and (team is None or r.key.team == team)
        ]
        return sorted(mine, key=lambda r: r.last_activity_at)[:limit]

    def list_paused_in(
        self,
        team: str,
        channel: str,
        *,
        enterprise: str | None = None,
        participant: str | None = None,
        limit: int = 50,
    ) -> list[Conversation]:
        """Conversations awaiting approval or interrupted (`PAUSED_IN_CHANNEL`) in one
        channel of one workspace (`team`, and `enterprise` as the key names it: None for a
        key without one), most recently active first, at most `limit`; with `participant`,
        only those that person wrote in. Expired conversations are never listed, nor
        values that could not be parts of a key. Bounded cost whatever the store holds
        elsewhere: it reads only that channel's paused threads, through an index of them,
        and examines at most `limit * PAUSED_PAGES` of the most recently active (aws: at
        most `PAUSED_PAGES` queries of `limit` index entries each). So with `participant`,
        a thread of theirs behind that many newer paused threads of others in the channel
        is not listed."""
        place = place_of(team, channel, enterprise)
        if place is None or limit < 1:
            return []
        with self.translating:
            return self.queries.list_paused_in(place, participant=participant, limit=limit)

    def list_waiting_on(
        self, team: str, user: str, *, enterprise: str | None = None, limit: int = 20
    ) -> list[Conversation]:
        """Conversations of one workspace awaiting approval that wait on `user`: the write
        that set the status named them as the run's starter (`Commit.run_by`; a write that
        names nobody leaves the listing as it was, and any other status takes the
        conversation out). The most recently waiting first, at most `limit`; never expired
        ones, nor values that could not be parts of a key. Bounded cost: one query of that
        person's entries in an index of waiting conversations, whatever the store holds."""
        workspace = workspace_of(team, enterprise)
        if workspace is None or not waitable(user) or limit < 1:
            return []
        with self.translating:
            return self.queries.list_waiting_on(workspace, user, limit=limit)

    def list_waiting_in(
        self, team: str, *, enterprise: str | None = None, limit: int = 50
    ) -> list[Conversation]:
        """Every conversation of one workspace awaiting approval and listed for someone
        (see `list_waiting_on`): for those who may decide any of them. At most `limit`, the
        most recently waiting first among those examined: at most `limit * WAITING_PAGES`
        index entries of that workspace (aws: at most `WAITING_PAGES` queries), so in a
        workspace with more waiting than that, some are not listed."""
        workspace = workspace_of(team, enterprise)
        if workspace is None or limit < 1:
            return []
        with self.translating:
            return self.queries.list_waiting_in(workspace, limit=limit)

    # -- feedback on answers ------------------------------------------------------------

    def record_feedback(
        self, key: ConversationKey, answer: str, user: str, verdict: Verdict
    ) -> FeedbackTally | None:
        """`user`'s verdict on the answer `answer` (its outbox id) of a conversation. One
        verdict per person and answer: clicking again changes it, and the conversation's
        tally (returned) and the overall one move with it. None when the conversation is
        gone (expired or never existed): nothing is recorded."""
        with self.translating:
            return self.feedback.record(key, answer, user, verdict)

    def count_feedback(self) -> FeedbackTally:
        """Verdicts over all conversations, since the store was created."""
        with self.translating:
            return self.feedback.count()
