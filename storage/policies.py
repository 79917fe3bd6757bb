"""A store's policies: how long its leases, states, tombstones, claims and events last, how
many messages a thread may have waiting, how many partitions its status index has. They are
set when the store is made and are the same for both backends, and so is what follows from
them (when a state expires, who may take a lease over, the record that replaces an expired
one): written once here, for `Store` (which is made of them) and for each backend's shared
part (`Database`, `Tables`), which holds the store's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from storage.models import Conversation, ConversationKey, Expiry
from storage.writes import BACKLOG_LIMIT, DROPPED_KEPT


# Neither compared, hashed nor shown by value: a `Store` is made of these and is one object.
@dataclass(eq=False, repr=False)
class Policies:
    lease_duration: timedelta = timedelta(seconds=15)
    lease_skew: timedelta = timedelta(seconds=1)
    state_ttl: timedelta = timedelta(days=7)
    tombstone_ttl: timedelta = timedelta(days=90)
    event_ttl: timedelta = timedelta(days=1)
    claim_ttl: timedelta = timedelta(minutes=15)
    backlog_limit: int = BACKLOG_LIMIT
    status_shards: int = 16

    def expiry(self, now: datetime) -> datetime:
        """When a state active at `now` expires."""
        return now + self.state_ttl

    def record_ttl(self, now: datetime) -> datetime:
        """The record's own TTL: it outlives its state as the conversation's tombstone."""
        return self.expiry(now) + self.tombstone_ttl

    def tombstone_until(self, record: Conversation) -> datetime:
        """When the record itself goes (its state expired a `tombstone_ttl` earlier)."""
        return record.expires_at + self.tombstone_ttl

    def takeover_cutoff(self, now: datetime) -> datetime:
        """A lease that expired before this instant may be taken over."""
        return now - self.lease_skew

    def new_record(self, key: ConversationKey, now: datetime) -> Conversation:
        return Conversation(
            key=key,
            generation=int(now.timestamp() * 1000),
            created_at=now,
            updated_at=now,
            last_activity_at=now,
            expires_at=self.expiry(now),
        )

    def revived(
        self, old: Conversation, now: datetime, dropped: Sequence[str] = (), queued: int = 0
    ) -> Conversation:
        """The record that replaces one whose state expired: a new generation (no old row
        is seen) with the old participants, fence, message counter and untold refusals,
        saying what expired.
        `dropped` are payloads of messages that were queued and never answered, the oldest
        first; `queued` how many there were in all (at least `len(dropped)`)."""
        kept = list(dropped)[:DROPPED_KEPT]
        return self.new_record(old.key, now).model_copy(
            update={
                "fence": old.fence,
                "inbox_seq": old.inbox_seq,
                "participants": old.participants,
                # Refused at the cap and not yet told: the thread is still told (not_taken).
                "refused": old.refused,
                "refused_more": old.refused_more,
                "expired_from": Expiry(
                    status=old.status,
                    last_activity_at=old.last_activity_at,
                    expired_at=old.expires_at,
                    generation=old.generation,
                    checkpoint=old.checkpoint,
                    dropped=kept,
                    dropped_more=max(queued, len(dropped)) - len(kept),
                ),
            }
        )
