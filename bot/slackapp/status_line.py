"""How a thread's work shows where Slack refuses agent sessions (`sessions`): a status line
(`assistant.threads.setStatus`, said again before Slack's 2-minute timeout), or, where Slack
refuses that too (decided per workspace), an :eyes: reaction on the thread; and a Stop
control (an ephemeral button) for whoever asked, once the run has worked a few seconds.
The Stop control is offered where sessions work too, when Slack says the app does not get
its own stop's event."""

from __future__ import annotations

import asyncio
import logging

from slack_sdk.errors import SlackApiError

from bot.slackapp.agent_blocks import stop_blocks
from bot.slackapp.live_thread import ERRORS, LiveThread, error_of

log = logging.getLogger(__name__)
STATUS_RENEWAL = 90.0  # seconds; Slack clears a status after about 2 minutes
STOP_OFFER_AFTER = 3.0  # seconds a run works before its requester is offered Stop
THINKING = "is thinking…"
LOADING = ["Thinking…", "Reading the conversation…", "Working it out…"]


class StatusLine:
    def __init__(self, *, renewal: float, stop_offer_after: float | None) -> None:
        self.renewal = renewal
        self.stop_offer_after = stop_offer_after
        self.no_status: set[str] = set()  # teams where Slack refused a status

    def start(self, thread: LiveThread, *, offer_stop: bool) -> None:
        """The timers of a thread whose work this shows (the first status is the caller's)."""
        if not thread.session:
            thread.timers.append(asyncio.create_task(self._renew(thread)))
        if offer_stop and thread.requester and self.stop_offer_after is not None:
            thread.timers.append(
                asyncio.create_task(self._offer_stop(thread, self.stop_offer_after))
            )

    async def show(self, thread: LiveThread, status: str) -> None:
        """Set (or, with "", clear) the thread's status line; a reaction where refused."""
        key = thread.key
        if key.team in self.no_status:
            if status and not thread.reacted:
                await self.react(thread, add=True)
            return
        try:
            await thread.client.assistant_threads_setStatus(
                channel_id=key.channel,
                thread_ts=key.thread_ts,
                status=status,
                loading_messages=LOADING if status == THINKING else None,
            )
            thread.status = status
        except SlackApiError as exc:
            log.info("%s: no status (%s); reactions instead", key, error_of(exc))
            self.no_status.add(key.team)
            if status:
                await self.react(thread, add=True)
        except ERRORS as exc:
            log.debug("%s: status not set: %s", key, error_of(exc))

    async def clear(self, thread: LiveThread) -> None:
        if thread.status:
            await self.show(thread, "")
        if thread.reacted:
            await self.react(thread, add=False)

    async def _renew(self, thread: LiveThread) -> None:
        """Slack drops a status after about 2 minutes: say it again while the run works."""
        while True:
            await asyncio.sleep(self.renewal)
            if thread.status:
                async with thread.lock:
                    await self.show(thread, thread.status)

    async def react(self, thread: LiveThread, *, add: bool) -> None:
        key = thread.key
        try:
            if add:
                await thread.client.reactions_add(
                    channel=key.channel, timestamp=key.thread_ts, name="eyes"
                )
            else:
                await thread.client.reactions_remove(
                    channel=key.channel, timestamp=key.thread_ts, name="eyes"
                )
            thread.reacted = add
        except ERRORS as exc:
            log.debug("%s: reaction: %s", key, error_of(exc))

    async def _offer_stop(self, thread: LiveThread, after: float) -> None:
        """A run still working after a few seconds: its requester gets a Stop control."""
        assert thread.requester
        await asyncio.sleep(after)  # cancelled with the thread's timers when the work ends
        try:
            await thread.client.chat_postEphemeral(
                channel=thread.key.channel,
                user=thread.requester,
                thread_ts=thread.key.thread_ts,
                text="Working on it. Use Stop to end the run.",
                blocks=stop_blocks(thread.key),
            )
        except ERRORS as exc:
            log.debug("%s: no Stop control: %s", thread.key, error_of(exc))
