"""The ledgers part of the storage contract: Slack event ids claimed once, and each tool
call's `approved` / `started` / `completed` record, fenced by the lease, that makes a
completed side effect never run twice."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol

from storage.models import (
    ConversationKey,
    Lease,
    ToolCallClaim,
    ToolCallRecord,
    ToolCallStatus,
)


def started(
    lease: Lease, call_id: str, tool_name: str, arguments: str, now: datetime
) -> ToolCallRecord:
    """The record `begin` writes: the call started at `now` under `lease`'s fence."""
    return ToolCallRecord(
        key=lease.key,
        call_id=call_id,
        tool_name=tool_name,
        arguments=arguments,
        status=ToolCallStatus.STARTED,
        fence=lease.fence,
        started_at=now,
    )


class LedgerPart(Protocol):
    """A backend's ledgers: what `ToolLedger` hands each call to, with every argument."""

    def claim_event(self, event_id: str) -> bool: ...

    def event_claimed(self, event_id: str) -> bool: ...

    def begin(
        self, lease: Lease, call_id: str, tool_name: str, arguments: str
    ) -> ToolCallClaim: ...

    def complete(
        self, lease: Lease, call_id: str, output: str, *, status: ToolCallStatus
    ) -> bool: ...

    def retry(self, lease: Lease, call_id: str, *, max_attempts: int) -> ToolCallRecord | None: ...

    def get(
        self, key: ConversationKey, call_id: str, generation: int | None
    ) -> ToolCallRecord | None: ...


class ToolLedger:
    ledger: LedgerPart
    translating: AbstractContextManager[None]

    def claim_event(self, event_id: str) -> bool:
        """True for the first claim of a Slack event id (until `event_ttl`), False after."""
        with self.translating:
            return self.ledger.claim_event(event_id)

    def event_claimed(self, event_id: str) -> bool:
        """Whether `event_id` holds a live claim (`claim_event`), claiming nothing."""
        with self.translating:
            return self.ledger.event_claimed(event_id)

    def begin_tool_call(
        self, lease: Lease, call_id: str, tool_name: str, arguments: str
    ) -> ToolCallClaim:
        """Record that a tool call starts, once per call id (fenced): created when the call
        is absent or `approved` (armed by the commit that approved it, not started yet),
        else the record as it is (`created` False)."""
        with self.translating:
            return self.ledger.begin(lease, call_id, tool_name, arguments)

    def complete_tool_call(
        self,
        lease: Lease,
        call_id: str,
        output: str,
        *,
        status: ToolCallStatus = ToolCallStatus.COMPLETED,
    ) -> bool:
        """Record a started call's result: one write, fenced by the lease (True), or, once
        the lease was taken from the writer (a discard, a takeover), by the fence the call
        was started under (False): only that writer ran it, so only it knows the result.
        Raises `LeaseLost` when neither holds. With status `CANCELLED`: it was recorded as
        approved or started but never ran (a stop came first); an `approved` call is
        cancelled under the lease only (once it is taken, its new holder may start it)."""
        with self.translating:
            return self.ledger.complete(lease, call_id, output, status=status)

    def retry_tool_call(
        self, lease: Lease, call_id: str, *, max_attempts: int
    ) -> ToolCallRecord | None:
        """Start again a call whose outcome is unknown (a keyed tool: the service it calls
        deduplicates by the call's key): fenced, and conditional on the call still being
        `started` after fewer than `max_attempts` attempts; the call is then this lease's
        (its fence) and its attempts grow by one. None when it is not `started` any more
        or its attempts are spent: it is not run again."""
        with self.translating:
            return self.ledger.retry(lease, call_id, max_attempts=max_attempts)

    def get_tool_call(
        self, key: ConversationKey, call_id: str, generation: int | None = None
    ) -> ToolCallRecord | None:
        """The ledger entry of `call_id` in the conversation's current generation (read from
        the record unless given)."""
        with self.translating:
            return self.ledger.get(key, call_id, generation)
