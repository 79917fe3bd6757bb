"""A second read-back after a post that may repeat one a dead process left in flight.

A redelivery (`DeliveryRef.maybe_posted`) reads its thread first and posts only what is not
there (`thread_readback.already_posted`). A post still in flight when its process died (the request
reached Slack, the message shows a moment later) is not there yet, so it is posted again.
Each post made that way is therefore checked once more, `delay` seconds later, in the
background: of the bot's messages marked as the same outbox entry and part, the earliest
stays and every other is deleted (`chat.delete`, logged). The earliest, so that a check made
twice, or by another process, keeps the same one. Nothing else is ever deleted: not a
message without that mark, not another app's, not one from well before the post (an earlier
conversation in the same thread, whose outbox ids may repeat). A check that fails is logged
and dropped; delivery never waits for one, and a stop runs those still waiting at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError

from bot import metrics
from bot.slackapp.clients import TeamNotInstalled
from bot.slackapp.marks import delivers
from bot.slackapp.thread_readback import ThreadReadback
from storage import ConversationKey, StorageError

log = logging.getLogger(__name__)
RECHECK_SECONDS = 5.0  # the default of BOT_DUPLICATE_CHECK_SECONDS
WINDOW_SECONDS = 600.0  # copies older than this before the post are another conversation's
CLOSE_SECONDS = 5.0  # how long a stop waits for the checks it runs early
ERRORS = (SlackApiError, aiohttp.ClientError, TimeoutError, OSError, TeamNotInstalled, StorageError)
Mark = tuple[str, int]  # outbox id, part


def later_copies(
    messages: list[dict[str, Any]], bot_id: str, outbox_id: str, part: int, *, since: float
) -> list[str]:
    """The ts of every copy of the post (the bot's messages marked as `outbox_id`, `part`,
    posted at or after `since`, epoch seconds) but the earliest, oldest first."""
    copies: list[tuple[float, str]] = []
    for message in messages:
        if message.get("bot_id") != bot_id or not delivers(message, outbox_id, part):
            continue
        ts = str(message.get("ts", ""))
        try:
            posted = float(ts)
        except ValueError:
            continue
        if posted >= since:
            copies.append((posted, ts))
    copies.sort()
    return [ts for _, ts in copies[1:]]


class DuplicateCheck:
    """The pending second read-backs, one background task per thread: marks posted while one
    waits join it, and push it back so that each gets its full `delay`."""

    def __init__(self, readback: ThreadReadback, delay: float = RECHECK_SECONDS) -> None:
        self.readback = readback
        self.delay = delay
        self._owed: dict[ConversationKey, dict[Mark, float]] = {}  # mark -> since (epoch)
        self._due: dict[ConversationKey, float] = {}  # monotonic
        self._tasks: dict[ConversationKey, asyncio.Task[None]] = {}
        self._closing = asyncio.Event()  # set: checks still waiting run at once

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def after_post(self, key: ConversationKey, outbox_id: str, part: int) -> None:
        """Look again in `delay` seconds for other copies of the post just made."""
        self._owed.setdefault(key, {})[(outbox_id, part)] = time.time() - WINDOW_SECONDS
        self._due[key] = time.monotonic() + self.delay
        if key not in self._tasks:
            self._tasks[key] = asyncio.create_task(self._run(key))

    async def close(self, within: float = CLOSE_SECONDS) -> None:
        """On shutdown: the checks still waiting run at once (a copy already landed is still
        found; a stop is not held up for their delay); those not done within `within`
        seconds are cancelled."""
        self._closing.set()
        tasks = list(self._tasks.values())
        if not tasks:
            return
        log.info("checking %d threads for duplicate posts before stopping", len(tasks))
        _, late = await asyncio.wait(tasks, timeout=within)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)

    async def _run(self, key: ConversationKey) -> None:
        try:
            while key in self._owed:
                wait = self._due[key] - time.monotonic()
                if wait > 0 and not self._closing.is_set():  # a later post may push it back
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._closing.wait(), wait)
                    continue
                marks = self._owed.pop(key)
                try:
                    await self._remove_copies(key, marks)
                except ERRORS as exc:
                    log.warning("%s: could not check for duplicate posts: %r", key, exc)
        finally:  # no await between the loop's last test and this: no mark is left behind
            self._owed.pop(key, None)
            self._due.pop(key, None)
            del self._tasks[key]

    async def _remove_copies(self, key: ConversationKey, marks: dict[Mark, float]) -> None:
        bot_id = await self.readback.bot_id(key)
        if bot_id is None:
            return  # whose messages are whose is unknown: delete nothing
        messages = await self.readback.messages(key, fresh=True)
        client = await self.readback.clients.for_key(key)
        for (outbox_id, part), since in sorted(marks.items()):
            for ts in later_copies(messages, bot_id, outbox_id, part, since=since):
                try:
                    await client.chat_delete(channel=key.channel, ts=ts)
                except SlackApiError as exc:
                    log.warning(
                        "%s: could not delete the second copy %s of %s part %d: %s",
                        key,
                        ts,
                        outbox_id,
                        part,
                        exc.response.get("error"),
                    )
                    continue
                self.readback.forget(key)
                metrics.DUPLICATES_DELETED.inc()
                log.warning(
                    "%s: deleted %s, a second copy of %s part %d (a post in flight when its "
                    "process died landed after the thread was read back)",
                    key,
                    ts,
                    outbox_id,
                    part,
                )
