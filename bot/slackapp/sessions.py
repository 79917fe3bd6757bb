"""Slack's agent sessions for the threads this process works on (`agents.sessions.setStatus`):
`processing` while a run works (Slack shows its own stop control; pressing it sends
`agent_session_stopped`, which the listeners turn into a durable stop), `suspended` while a
call waits for a person's decision, `closed` when the work is done: by the call that closes
the answer's stream where the answer ends the work (`chat.stopStream`'s `session_status`),
else on its own. A session is created by its first status, titled then with the
conversation's first request.

Where Slack refuses sessions (a workspace without the agent features, a token or channel
type it does not take) the thread falls back to the status line and the bot's own Stop
control (`status_line`), decided once per workspace (per kind of channel, when Slack says
the channel type is the reason); a passing failure only affects that thread. Failures never
touch the run."""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError

from bot.slackapp.live_thread import ERRORS, LiveThread, error_of
from storage import ConversationKey

log = logging.getLogger(__name__)
PROCESSING, SUSPENDED, CLOSED = "processing", "suspended", "closed"
TITLE_LIMIT = 200
# Answers that say nothing of whether sessions work here: try again next time.
PASSING = frozenset({"ratelimited", "fatal_error", "internal_error", "service_unavailable"})
CHANNEL_TYPE = "method_not_supported_for_channel_type"
NO_STOP_EVENT = "missing_agent_session_stopped_event_subscription"


def channel_kind(key: ConversationKey) -> str:
    """DMs (`D…`) and the rest, as Slack's channel-type refusals tell them apart."""
    return "dm" if key.channel.startswith("D") else "channel"


class AgentSessions:
    def __init__(self) -> None:
        self.refused: set[tuple[str, str]] = set()  # (team, channel kind) without sessions
        self.no_stop_event: set[str] = set()  # teams whose sessions show no stop of ours

    def available(self, key: ConversationKey) -> bool:
        return (key.team, channel_kind(key)) not in self.refused

    def native_stop(self, key: ConversationKey) -> bool:
        """Slack's stop control reaches the app there (its event is subscribed)."""
        return key.team not in self.no_stop_event

    async def open(self, thread: LiveThread, title: str | None) -> bool:
        """The run works: `processing` (creating the session, titled, if it is new). False
        where Slack refuses: the caller shows the work the other way."""
        if not self.available(thread.key):
            return False
        thread.session = await self._set(thread, PROCESSING, title=title)
        return thread.session

    def closing_with_answer(self, thread: LiveThread) -> str | None:
        """The status the answer's closing stream sets (`chat.stopStream`'s
        `session_status`, sparing `settle` its call): `closed`, where a session shows the
        work and nothing waits for a person."""
        return CLOSED if thread.session and not thread.waiting else None

    async def reopen(self, thread: LiveThread) -> None:
        """The thread works on after its answer closed the session: `processing` again."""
        if thread.settled:
            thread.settled = False
            thread.session = await self._set(thread, PROCESSING)

    async def settle(self, thread: LiveThread) -> None:
        """The run stopped working here: `suspended` while a call waits for a decision,
        else `closed` (unless its answer closed it already)."""
        if thread.session and not thread.settled:
            await self._set(thread, SUSPENDED if thread.waiting else CLOSED)

    async def close(self, thread: LiveThread) -> None:
        """Nothing runs there (Slack's stop pressed on a session left `processing` by a run
        that is over): `closed`."""
        if self.available(thread.key):
            await self._set(thread, CLOSED)

    async def _set(self, thread: LiveThread, status: str, *, title: str | None = None) -> bool:
        key = thread.key
        try:
            answer = await thread.client.agents_sessions_setStatus(
                channel_id=key.channel,
                thread_ts=key.thread_ts,
                status=status,
                title=title[:TITLE_LIMIT] if title else None,
                initiator_user_id=thread.requester if status == PROCESSING else None,
            )
        except SlackApiError as exc:
            error = error_of(exc)
            if error not in PASSING:
                log.info("%s: no agent session (%s); the status line instead", key, error)
                kinds = [channel_kind(key)] if error == CHANNEL_TYPE else ["dm", "channel"]
                self.refused |= {(key.team, kind) for kind in kinds}
            return False
        except ERRORS as exc:
            log.debug("%s: session status not set: %s", key, error_of(exc))
            return False
        if answer.get("warning") and NO_STOP_EVENT in str(answer.get("warning")):
            self.no_stop_event.add(key.team)  # Slack's stop would not reach us: ours too
        return True
