"""A serve as the parts of a pass see it (the approvals, expiry, stops, state checks, the
run): the members of `Serving` they read, and the actions they take through it (posting,
committing, setting state aside). Typed against this rather than `Serving`, which calls
them, they need nothing of `serving`. None of them changes the serve's working state: what
they decide they return (`pass_results`), and the serve applies it. Read-only members are
properties, so that a plain attribute of `Serving` satisfies them."""

from __future__ import annotations

from typing import Any, Protocol

from agents import RunState, TResponseInputItem

from bot.runtime.armed_calls import ArmedInTurn, ArmedView
from bot.runtime.envelope import (
    AwaitingCall,
    DecisionMade,
    DecisionRequest,
    Envelope,
    HeldMessage,
)
from bot.runtime.model_window import OpenWindow
from bot.runtime.outcomes import Notice, Outcome
from bot.runtime.runtime_parts import RuntimeParts
from storage import (
    Conversation,
    ConversationKey,
    ConversationSession,
    Lease,
    LeaseKeeper,
    Status,
    Store,
)
from storage.calls import StorageCalls

# What a run starts from: a new input, or a saved run state to continue.
Start = str | list[TResponseInputItem] | RunState[Any]


class ServingView(Protocol):
    """What a pass's collaborators use of `Serving`."""

    @property
    def parts(self) -> RuntimeParts: ...
    @property
    def key(self) -> ConversationKey: ...
    @property
    def record(self) -> Conversation: ...
    @property
    def version(self) -> int: ...
    @property
    def store(self) -> Store: ...
    @property
    def storage_calls(self) -> StorageCalls: ...
    @property
    def lease(self) -> Lease: ...
    @property
    def keeper(self) -> LeaseKeeper | None: ...
    @property
    def stop_asked(self) -> bool: ...
    @property
    def decided(self) -> dict[str, DecisionMade]: ...
    @property
    def armed(self) -> ArmedView: ...
    @property
    def armed_in_turn(self) -> ArmedInTurn: ...
    @property
    def stopped_by(self) -> str: ...
    @property
    def remind(self) -> bool: ...

    def check(self) -> None: ...

    # -- what it tells, and what it reads -----------------------------------------------

    async def show_work(self, requester: str | None) -> None: ...
    async def emit_now(self, outcome: Outcome) -> None: ...
    async def refuse(self, decision: DecisionRequest, text: str) -> None: ...
    async def input_for(self, messages: list[HeldMessage]) -> list[TResponseInputItem]: ...
    async def open_window(
        self, session: ConversationSession, given: list[Any], started_by: str
    ) -> OpenWindow: ...
    async def saved_envelope(self) -> Envelope | None: ...

    # -- running and writing ------------------------------------------------------------

    async def begin_run(self, started_by: str) -> None: ...

    async def commit(
        self,
        envelope: Envelope,
        *,
        consume: list[str],
        outcomes: list[Outcome],
        items: list[str] | None = None,
        base_seq: int | None = None,
        status: Status = Status.RUNNING,
        arm: list[AwaitingCall] | None = None,
        clear_expiry: bool = False,
        clear_stop: bool = False,
    ) -> int | None: ...

    async def set_aside_state(
        self,
        finished: Envelope,
        *,
        notice: Notice,
        items: list[str],
        consume: list[str],
        release_as: Status,
        status: Status = Status.RUNNING,
        clear_stop: bool = False,
        orphan_ok: bool = False,
    ) -> None: ...
