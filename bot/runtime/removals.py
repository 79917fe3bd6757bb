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

from bot.runtime.discarding import discard_team
from bot.runtime.runtime_parts import RuntimeParts
from storage import Removal

log = logging.getLogger(__name__)


def place(removal: Removal) -> str:
    """The workspace (or organisation) a removal is of, for the log."""
    return "/".join(part for part in (removal.enterprise, removal.team) if part)


class Removals:
    def __init__(self, parts: RuntimeParts) -> None:
        self.parts = parts
        self.store = parts.store
        self.storage_calls = parts.storage_calls
        self._finishing: set[str] = set()  # the removals this process is finishing

    async def known(self, removal_id: str) -> bool:
        """A removal recorded under this id already (pending or finished): told again."""
        return await self.storage_calls(self.store.find_removal, removal_id) is not None

    async def record(self, removal_id: str, *, team: str | None, enterprise: str | None) -> bool:
        """A workspace (every workspace of `enterprise` when `team` is None) removed the app:
        recorded durably (call it before what told of it is acknowledged), then its
        conversations begun before now are discarded in a task of its own (which `drain`
        waits for; a failure, or a process that dies first, leaves it to the recovery
        sweep). False, and nothing more, when `removal_id` was recorded already."""
        removal = Removal(
            removal_id=removal_id, team=team, enterprise=enterprise, at=self.store.clock()
        )
        if not await self.storage_calls(self.store.record_removal, removal):
            return False
        self.finish_soon(removal)
        return True

    async def sweep(self) -> None:
        """The recovery sweep's share: finish the removals recorded a lease ago or more (the
        process that recorded one finishes it at once, unless it died)."""
        if self.parts.draining:
            return
        pending = await self.storage_calls(self.store.pending_removals)
        cutoff = self.store.clock() - self.store.lease_duration
        for removal in pending:
            if removal.at <= cutoff:
                self.finish_soon(removal)

    def finish_soon(self, removal: Removal) -> None:
        """Discard the conversations `removal` applies to, then mark it finished, in a task
        of its own (unless one of this process does it already)."""
        if removal.removal_id in self._finishing:
            return
        self._finishing.add(removal.removal_id)
        self.parts.in_background(self._finish(removal))

    async def _finish(self, removal: Removal) -> None:
        """Discard the conversations a removal applies to (safe to repeat: a conversation
        discarded already is not listed again), then mark it finished."""
        try:
            discarded = await discard_team(
                self.parts, removal.team, removal.enterprise, started_before=removal.at
            )
            await self.storage_calls(self.store.finish_removal, removal.removal_id)
            log.info("removed from %s: %d conversations discarded", place(removal), len(discarded))
        except Exception:
            log.exception(
                "finishing the removal from %s failed; recovery tries again", place(removal)
            )
        finally:
            self._finishing.discard(removal.removal_id)
