"""What the guarded tools of one turn share with the runtime that drives it (`guard`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from bot.runtime.armed_calls import ArmedCalls, ArmedInTurn
from bot.runtime.progress import Step, shown
from bot.runtime.tool_failures import NoAnswer
from storage import Lease, StorageError, Store
from storage.calls import StorageCalls


@dataclass(frozen=True)
class Unanswered:
    """A call sent that got no answer: its outcome is unknown (`tool_failures`)."""

    call_id: str
    tool: str
    why: NoAnswer
    server: str | None = None  # an MCP tool's server, as people know it


@dataclass
class TurnScope:
    """What wrapped tools need while a run is driven: storage and the lease to fence with,
    and what they observed for the runtime to act on."""

    storage: StorageCalls
    lease: Lease
    armed: ArmedInTurn = field(default_factory=ArmedCalls)  # approved or claimed, not started
    human_approval: dict[str, bool] = field(default_factory=dict)
    unknown_outcomes: list[tuple[str, str]] = field(default_factory=list)  # (call id, tool)
    fault: StorageError | None = None  # raised by storage inside a tool; re-raised after the turn
    on_step: Callable[[str, str, Step], Awaitable[None]] | None = None  # progress, best effort
    running: int = 0  # side-effecting calls executing right now (a stop waits for them)
    idle: asyncio.Event = field(default_factory=asyncio.Event)  # set while `running` is 0
    stop_requested: Callable[[], bool] = lambda: False  # someone asked the run to stop
    keyed_attempts: int = 3  # times a keyed call may be started in all
    started_again: list[tuple[str, str]] = field(default_factory=list)  # keyed, after a crash
    fates: dict[str, Step] = field(default_factory=dict)  # how calls run in this turn ended
    unanswered: list[Unanswered] = field(default_factory=list)  # sent, no answer came
    late: list[tuple[str, str, str]] = field(default_factory=list)  # (call, tool, output)
    # recorded after the lease was taken from us (a discard): the thread is told after
    ran_before: list[tuple[str, str]] = field(default_factory=list)  # its result recorded
    # Approved by an earlier serve's commit (before a restart), never started: run now.
    started_late: list[tuple[str, str]] = field(default_factory=list)
    # One side effect at a time (`one_at_a_time`): a crash cuts short at most one.
    side_effects: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def store(self) -> Store:
        return self.storage.store

    def __post_init__(self) -> None:
        self.idle.set()

    def reset(self) -> None:
        self.human_approval.clear()
        self.unknown_outcomes.clear()
        self.started_again.clear()
        self.fates.clear()
        self.unanswered.clear()
        self.ran_before.clear()
        self.started_late.clear()
        self.fault = None

    @asynccontextmanager
    async def one_at_a_time(self) -> AsyncIterator[None]:
        """Held while a side-effecting call starts, runs and is recorded: the calls the
        model asked for together run one after the other, so a crash leaves at most one
        of them started and unfinished, and the others approved, to run after it. A call
        made from inside a side effect (a tool that runs an agent) does not wait for it."""
        if _INSIDE.get():
            yield
            return
        async with self.side_effects:
            token = _INSIDE.set(True)
            try:
                yield
            finally:
                _INSIDE.reset(token)

    async def show(self, call_id: str, tool: str, state: Step) -> None:
        if self.on_step is not None:
            on_step = self.on_step
            await shown(lambda: on_step(call_id, tool, state))


CURRENT_SCOPE: ContextVar[TurnScope | None] = ContextVar("bot_turn_scope", default=None)
_INSIDE: ContextVar[bool] = ContextVar("bot_inside_side_effect", default=False)
