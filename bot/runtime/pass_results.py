"""What the parts of a pass decide (the approvals, expiry, stops, state checks, the run),
returned to the serve as values that it applies: `Serving` alone writes its working state.
Each value says what one kind of decision leaves the serve as."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents import RunState

from bot.runtime.envelope import DecisionMade, Envelope, HeldMessage, RunWindow
from storage import Status


@dataclass(frozen=True)
class Settled:
    """What a part of a pass decided the thread is left as: released as `status` when
    nothing more is to do, after reading the inbox once more when `reread` (messages that
    came for the run it ended). `disarmed`: calls this serve armed that the part settled
    (a check stopped them before they started): the serve no longer counts them as its own."""

    status: Status
    reread: bool = False
    disarmed: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Paused:
    """The run needs MCP servers that are down (`mcp_servers.paused_for`): the thread waits,
    interrupted, and nothing more runs in this serve (not even the rest of a backlog)."""


@dataclass(frozen=True)
class FailedClosed:
    """The saved state was set aside as untrustworthy (`state_checks.fail_closed`): what
    arrived with this pass is served from `finished`, the fresh state, after reading the
    inbox once more."""

    finished: Envelope


@dataclass(frozen=True)
class Stopped:
    """A run was stopped on request (`applying_stops`): who stopped it (`by`, told to a
    later stop; "" when not known), who decided what with the calls it stopped
    (`decided`), the calls this serve armed that the stop settled (`disarmed`), and
    whether to read the inbox once more (`reread`: what came after the stop)."""

    by: str
    decided: dict[str, DecisionMade]
    disarmed: frozenset[str]
    reread: bool = False


@dataclass(frozen=True)
class StopsAnswered:
    """Stop requests found nothing to stop (`applying_stops.stop_requests`): each stopper
    was told, and the requests consumed and cleared in the store; the pass goes on with
    what else it read."""


@dataclass(frozen=True)
class Decisions:
    """Who decided what (`approvals`), carried to the envelopes the serve writes next."""

    decided: dict[str, DecisionMade]


@dataclass(frozen=True)
class AwaitsDecision:
    """The run waits for a decision: released as awaiting approval, listed for the person
    who started it (`Store.list_waiting_on`). `reminded`: the thread was reminded of what
    it waits for, which is done once."""

    started_by: str
    reminded: bool = False


@dataclass(frozen=True)
class Resume:
    """Every call awaiting a person was decided (`approvals`) and the decisions committed:
    the run continues from `state`, carrying `decided`."""

    decided: dict[str, DecisionMade]
    state: RunState[Any]
    started_by: str
    held: list[HeldMessage]
    window: RunWindow | None


@dataclass(frozen=True)
class LeftAs:
    """The run finished with nothing held for the next (`driver`): released as `status`
    when nothing more is to do."""

    status: Status


@dataclass(frozen=True)
class GivenBack:
    """The process is stopping (`driver`): released as `running`, its messages queued,
    so that another process continues it."""


PassResult = (
    Settled
    | Paused
    | FailedClosed
    | Stopped
    | StopsAnswered
    | Decisions
    | AwaitsDecision
    | Resume
    | LeftAs
    | GivenBack
)
