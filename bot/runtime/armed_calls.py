"""The calls a serve armed: approved by its commits (or claimed by its guard just before
running them) and not started yet. One owner (`Serving`) holds them; each change is a named
transition, so who moves a call in or out is plain: the serve's commit arms, the guard
claims and starts or settles, the serve disarms what a stop or a check settled. The parts of
a pass only read them (`ArmedView`); the guarded tools of a turn get the guard's
transitions (`ArmedInTurn`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class ArmedView(Protocol):
    """Read-only: whether a call is armed, and all of them as they are now."""

    def __contains__(self, call_id: object) -> bool: ...
    def snapshot(self) -> frozenset[str]: ...


class ArmedInTurn(ArmedView, Protocol):
    """What the guard does with a call as it runs it (`guard.claim_and_run`)."""

    def claimed(self, call_id: str) -> None: ...
    def started(self, call_id: str) -> None: ...
    def settled(self, call_id: str) -> None: ...


class ArmedCalls:
    """Call ids armed by this serve and not started yet."""

    def __init__(self) -> None:
        self._ids: set[str] = set()

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._ids

    def snapshot(self) -> frozenset[str]:
        return frozenset(self._ids)

    def armed_by_commit(self, call_ids: Iterable[str]) -> None:
        """Approved by a commit of this serve, to run next."""
        self._ids.update(call_ids)

    def claimed(self, call_id: str) -> None:
        """Claimed here by the guard: armed until the tool itself starts, so that a stop
        landing meanwhile has it recorded as cancelled, not as started."""
        self._ids.add(call_id)

    def started(self, call_id: str) -> None:
        """The tool itself starts: no longer a call that a stop can cancel."""
        self._ids.discard(call_id)

    def settled(self, call_id: str) -> None:
        """The ledger already holds its outcome: it is not run here."""
        self._ids.discard(call_id)

    def disarm(self, call_ids: Iterable[str]) -> None:
        """Settled by a stop or a check before they started: no longer this serve's to run."""
        self._ids.difference_update(call_ids)
