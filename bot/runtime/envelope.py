"""What a checkpoint blob holds (the SDK's RunState plus the runtime's own facts about it),
and what an inbox entry holds (a user's message, a decision on a pending call, a stop, a
probe), parsed for one pass of a serve (`Entries`)."""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from bot.runtime.context_source import SharedFile
from bot.runtime.outcomes import PendingCall
from bot.runtime.viewing import Viewing
from storage import InboxEntry
from storage.text import json_text

log = logging.getLogger("bot.runtime.serving")  # an unreadable entry is the serve's line
# In a Python string every surrogate is unpaired: JSON's escaped pairs become one character.
_SURROGATE = re.compile("[\ud800-\udfff]")

ENVELOPE_FORMAT = 1


class HeldMessage(BaseModel):
    """A user message kept while a run is paused or running; it is answered after. Given to
    the model like any other message (`model_input`): its files are read only then."""

    user: str
    text: str
    ts: str | None = None
    files: list[SharedFile] = Field(default_factory=list)
    viewing: Viewing | None = None

    @classmethod
    def of(cls, message: UserMessage) -> HeldMessage:
        return cls(
            user=message.user,
            text=message.text,
            ts=message.ts,
            files=message.files,
            viewing=message.viewing,
        )


class AwaitingCall(PendingCall):
    human: bool = Field(description="a person must decide; False: the runtime approves itself")
    asked_at: datetime | None = Field(
        default=None,
        description="when the request was committed (a reply before it is not an answer to it)",
    )


class DecisionMade(BaseModel):
    """Who decided a call, so that a late or repeated click is answered precisely."""

    approved: bool
    user: str
    stopped: bool = False  # not decided: the run was stopped (by `user`) before it ran


class RunWindow(BaseModel):
    """What a run's checkpoints say of its view of the history (`summaries`): the summary it
    was given (by the sequence number it sums up to; 0: none) and how many earlier items
    were neither summed up nor given to it."""

    summary_through: int = 0
    left_out: int = 0


class Envelope(BaseModel):
    format: int = ENVELOPE_FORMAT
    run_state: dict[str, Any]
    started_by: str
    awaiting: list[AwaitingCall] = Field(default_factory=list)
    held: list[HeldMessage] = Field(default_factory=list)
    finished: bool = False
    decided: dict[str, DecisionMade] = Field(
        default_factory=dict, description="recent decisions, by call id"
    )
    window: RunWindow | None = Field(
        default=None,
        description="what the run is given in place of its earlier turns (`summaries`)",
    )
    outbox: list[dict[str, Any]] = Field(
        default_factory=list,
        description="outcomes still owed to the thread: those of this checkpoint, after any "
        "an earlier checkpoint could not deliver; the record's delivery cursor says how many "
        "reached the user",
    )

    @property
    def humans(self) -> list[AwaitingCall]:
        return [call for call in self.awaiting if call.human]

    @property
    def runnable(self) -> bool:
        """It holds a run to continue (not only held messages or a finished run)."""
        return not self.finished and bool(self.run_state)

    def document(self) -> dict[str, Any]:
        # Not through pydantic's JSON, which cannot write a lone surrogate (a tool's broken
        # emoji in the RunState): the store's JSON text keeps it exactly.
        return self.model_dump(mode="json")


class UserMessage(BaseModel):
    """The inbox payload of one Slack message."""

    kind: Literal["message"] = "message"
    user: str
    text: str
    ts: str | None = None
    files: list[SharedFile] = Field(default_factory=list)
    addressed: bool = Field(
        default=False,
        description="it called the bot (a mention or a DM), rather than replying in a thread "
        "the bot is part of: after an expiry, it starts a fresh conversation",
    )
    viewing: Viewing | None = Field(
        default=None, description="what its author was viewing as they wrote (`viewing`)"
    )


class DecisionRequest(BaseModel):
    """The inbox payload of a click on Approve or Reject: kept before it is acknowledged,
    applied by whoever serves the thread next. `reply_to` answers the clicker privately."""

    kind: Literal["decision"] = "decision"
    call_id: str
    approve: bool
    user: str
    version: int
    reason: str | None = None
    request_message: str | None = None
    reply_to: str | None = None


class Probe(BaseModel):
    """The inbox payload of a request about the thread that is not a message (a Stop click or
    a `/resume` after the conversation's state expired): it brings the thread back so that
    the thread is told; otherwise it changes nothing."""

    kind: Literal["probe"] = "probe"
    user: str
    reason: str


class StopRequest(BaseModel):
    """The inbox payload of a request to stop the run (the Stop control, the reply `stop`):
    kept like a message (so that no release passes over it) and, in the same write, flagged
    on the record for the run in progress to see at once."""

    kind: Literal["stop"] = "stop"
    user: str
    reply_to: str | None = None


InboxPayload = UserMessage | DecisionRequest | Probe | StopRequest


def payload_text(payload: InboxPayload) -> str:
    """What the inbox keeps: JSON text that holds whatever text the payload carries (a lone
    surrogate too, which pydantic's JSON cannot write; see `storage.text`)."""
    return json_text(payload.model_dump(mode="json"))


def parse_payload(text: str) -> InboxPayload:
    """Raises ValueError for a payload that is not one of ours."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not an object")
    if data.get("kind") == "decision":
        return DecisionRequest.model_validate(data)
    if data.get("kind") == "probe":
        return Probe.model_validate(data)
    if data.get("kind") == "stop":
        return StopRequest.model_validate(data)
    return UserMessage.model_validate(data)


def clean_text(text: str) -> str:
    """Unpaired surrogates (what `json.loads` makes of a broken `\\ud83d` escape) cannot be
    encoded as UTF-8: replace them with U+FFFD, so that the message is kept, not dropped."""
    return _SURROGATE.sub("\ufffd", text)


class Entries:
    """One pass's share of the inbox, parsed, in arrival order (probes left out: they only
    bring a thread back, and are consumed with the rest)."""

    def __init__(self, inbox: list[InboxEntry]) -> None:
        self.ids = [entry.entry_id for entry in inbox]
        self.items: list[UserMessage | DecisionRequest] = []
        self.item_ids: list[str] = []  # the entry id of each item
        self.arrived: list[datetime] = []  # when each item was kept
        self.stops: list[StopRequest] = []  # requests to stop the run (in arrival order)
        self.stop_ids: list[str] = []
        self.stop_arrived: list[datetime] = []
        for entry in inbox:
            try:
                payload = parse_payload(entry.payload)
            except ValueError:
                log.error("%s: unreadable inbox entry %s dropped", entry.event_id, entry.entry_id)
                continue
            if isinstance(payload, Probe):
                continue
            if isinstance(payload, StopRequest):
                self.stops.append(payload)
                self.stop_ids.append(entry.entry_id)
                self.stop_arrived.append(entry.received_at)
                continue
            self.items.append(payload)
            self.item_ids.append(entry.entry_id)
            self.arrived.append(entry.received_at)

    @property
    def messages(self) -> list[UserMessage]:
        return [item for item in self.items if isinstance(item, UserMessage)]

    @property
    def decisions(self) -> list[DecisionRequest]:
        return [item for item in self.items if isinstance(item, DecisionRequest)]
