"""One pass's share of a thread's inbox, parsed (see `serving`)."""

from __future__ import annotations

import logging
from datetime import datetime

from bot.runtime.envelope import DecisionRequest, Probe, StopRequest, UserMessage, parse_payload
from storage import InboxEntry

log = logging.getLogger("bot.runtime.serving")  # the serve's lines


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
