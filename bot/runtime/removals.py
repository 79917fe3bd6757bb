"""Workspaces that removed the application (in Slack: `app_uninstalled`, or the bot's token
revoked). Each is recorded durably before whatever told of it is acknowledged, keyed by its
id (Slack's event id: a redelivery is a duplicate, also after a reinstall), with the moment
it was learnt; its conversations begun before that moment are discarded after the
acknowledgement, which can take a while for a busy workspace, and then it is marked
finished. A process that dies in between leaves it pending: the recovery sweep of any
replica finishes it once it is a lease old (the time after which a dead holder's threads
are taken over too), unless a task of its own is finishing it already. A workspace that
installed the app again meanwhile keeps every conversation it began since."""

from __future__ import annotations

import logging
from datetime import datetime

from bot.runtime.discarding import discard_team
from bot.runtime.runtime_parts import RuntimeParts
from storage import Removal

log = logging.getLogger(__name__)


def place(removal: Removal) -> str:
    """The workspace (or organisation) a removal is of, for the log."""
    return "/".join(part for part in (removal.enterprise, removal.team) if part)


async def finish_removal(rt: RuntimeParts, removal: Removal) -> None:
    """Discard the conversations a removal applies to (safe to repeat: a conversation
    discarded already is not listed again), then mark it finished."""
    discarded = await discard_team(rt, removal.team, removal.enterprise, started_before=removal.at)
    await rt.io(rt.store.finish_removal, removal.removal_id)
    log.info("removed from %s: %d conversations discarded", place(removal), len(discarded))


def left_behind(pending: list[Removal], now: datetime, rt: RuntimeParts) -> list[Removal]:
    """The pending removals a recovery sweep finishes: recorded a lease ago or more (the
    process that recorded one finishes it at once, unless it died)."""
    return [removal for removal in pending if removal.at <= now - rt.store.lease_duration]
