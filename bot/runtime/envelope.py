"""What a checkpoint blob holds: the SDK's RunState plus the runtime's own facts about it."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from bot.runtime.outcomes import PendingCall

ENVELOPE_FORMAT = 1


class HeldMessage(BaseModel):
    """A user message kept while a run waits for approval; it is answered after."""

    user: str
    text: str
    event_id: str


class AwaitingCall(PendingCall):
    human: bool = Field(description="a person must decide; False: the runtime approves itself")


class Envelope(BaseModel):
    format: int = ENVELOPE_FORMAT
    run_state: dict[str, Any]
    started_by: str
    awaiting: list[AwaitingCall] = Field(default_factory=list)
    held: list[HeldMessage] = Field(default_factory=list)
    finished: bool = False
    outbox: list[dict[str, Any]] = Field(
        default_factory=list,
        description="outcomes of this checkpoint, redelivered after a crash until the "
        "record's delivered_version reaches its version",
    )

    @property
    def humans(self) -> list[AwaitingCall]:
        return [call for call in self.awaiting if call.human]

    def document(self) -> dict[str, Any]:
        return json.loads(self.model_dump_json())  # type: ignore[no-any-return]


class UserMessage(BaseModel):
    """The inbox payload of one Slack message."""

    user: str
    text: str
    ts: str | None = None
