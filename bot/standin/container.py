"""Slack's agent container and App Home in the Web API stand-in: agent sessions
(`agents.sessions.setStatus`, `agents.sessions.rename`), suggested prompts and thread titles
(`assistant.threads.setSuggestedPrompts`, `assistant.threads.setTitle`) and Home views
(`views.publish`). Like Slack: a session is created by its first status (its title and
initiator kept only then) and renamed only once it exists; a session in `processing` shows
Slack's own stop control, which `stop_session` presses (it ends the thread's streams, as
Slack does, and returns what the `agent_session_stopped` event names); without the app
subscribed to that event a status answers with Slack's warning. Tests make a method refuse
with `method_errors` (e.g. `not_allowed_token_type`) or per channel with `channel_errors`;
a workspace without sessions answers every status with `sessions_refused`."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.standin.records import Message, json_list, json_object

SESSION_STATUSES = ("active", "processing", "suspended", "closed")
TITLE_LIMIT = 200
PROMPTS_LIMIT = 4
VIEW_BLOCKS_LIMIT = 100
NO_STOP_EVENT = "missing_agent_session_stopped_event_subscription"


def refused(error: str) -> dict[str, Any]:
    return {"ok": False, "error": error}


@dataclass
class Session:
    """One thread's agent session: its statuses in order, its title and who started it."""

    channel: str
    thread_ts: str
    title: str | None
    initiator: str | None
    statuses: list[tuple[float, str]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return self.statuses[-1][1]


@dataclass
class Prompts:
    title: str | None
    prompts: list[dict[str, str]]
    thread_ts: str | None  # None: set for the channel's latest message (the agent experience)
    ts: str = ""  # when they were set, as a message ts (later messages have greater ones)


class ContainerMethods:
    """The methods, mixed into `SlackWebApi` (which owns `messages`)."""

    messages: dict[tuple[str, str], Message]

    if TYPE_CHECKING:

        def next_ts(self) -> str: ...

    def __init__(self) -> None:
        self.sessions: dict[tuple[str, str], Session] = {}
        self.views: dict[str, list[dict[str, Any]]] = {}  # user -> published Home views
        self.prompts: dict[str, list[Prompts]] = {}  # channel -> suggested prompts, in order
        self.titles: dict[tuple[str, str], str] = {}  # assistant thread -> its title
        self.session_stop_subscribed = True  # the app subscribes to agent_session_stopped
        self.sessions_refused: str | None = None  # a workspace without sessions: this error

    # -- agent sessions -----------------------------------------------------------------

    def m_agents_sessions_setStatus(self, args: dict[str, Any]) -> dict[str, Any]:
        return self.set_session_status(
            args["channel_id"],
            args["thread_ts"],
            args["status"],
            title=args.get("title"),
            initiator=args.get("initiator_user_id"),
        )

    def set_session_status(
        self,
        channel: str,
        thread_ts: str,
        status: object,
        *,
        title: object = None,
        initiator: str | None = None,
    ) -> dict[str, Any]:
        """`agents.sessions.setStatus`, and `chat.stopStream`'s `session_status`: the
        thread's session moves to `status`, created (titled) if it is new."""
        refusal = self.session_refusal(status, title)
        if refusal is not None:
            return refusal
        session = self.sessions.get((channel, thread_ts))
        if session is None:
            session = Session(
                channel, thread_ts, title if isinstance(title, str) else None, initiator
            )
            self.sessions[(channel, thread_ts)] = session
        session.statuses.append((time.time(), str(status)))
        answer: dict[str, Any] = {"ok": True, "status": status, "title": session.title}
        if not self.session_stop_subscribed:
            answer["warning"] = NO_STOP_EVENT
        return answer

    def session_refusal(self, status: object, title: object = None) -> dict[str, Any] | None:
        """Slack's answer to a session status it would not set; None when it would."""
        if self.sessions_refused:
            return refused(self.sessions_refused)
        if status not in SESSION_STATUSES:
            return refused("invalid_arguments")
        if title is not None and (not isinstance(title, str) or len(title) > TITLE_LIMIT):
            return refused("invalid_arguments")
        return None

    def m_agents_sessions_rename(self, args: dict[str, Any]) -> dict[str, Any]:
        session = self.sessions.get((args["channel_id"], args["thread_ts"]))
        title = args["title"]
        if not isinstance(title, str) or not title or len(title) > TITLE_LIMIT:
            return refused("invalid_arguments")
        if session is None:
            return refused("session_not_found")
        session.title = title
        return {"ok": True, "title": title}

    def session(self, channel: str, thread_ts: str) -> Session | None:
        return self.sessions.get((channel, thread_ts))

    def stop_session(self, channel: str, thread_ts: str) -> list[str]:
        """Someone presses Slack's stop on the thread's session: its streams end where they
        are (no more text goes in). Returns their ts, as the event's `streaming_message_ts`.
        The session's status is left alone: the app moves it on."""
        stopped = []
        for message in self.messages.values():
            if message.channel == channel and message.thread_ts == thread_ts and message.streaming:
                message.streaming = False
                message.text = message.text or message.streamed
                stopped.append(message.ts)
        return stopped

    # -- suggested prompts and titles ---------------------------------------------------

    def m_assistant_threads_setSuggestedPrompts(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            prompts = json_list(args.get("prompts")) or []
        except ValueError:
            return refused("invalid_arguments")
        valid = all(
            isinstance(p, dict)
            and isinstance(p.get("title"), str)
            and isinstance(p.get("message"), str)
            for p in prompts
        )
        if not prompts or len(prompts) > PROMPTS_LIMIT or not valid:
            return refused("invalid_arguments")
        channel = str(args["channel_id"])
        shown = Prompts(args.get("title"), prompts, args.get("thread_ts"), self.next_ts())
        self.prompts.setdefault(channel, []).append(shown)
        return {"ok": True}

    def m_assistant_threads_setTitle(self, args: dict[str, Any]) -> dict[str, Any]:
        title = args["title"]
        if not isinstance(title, str) or not title:
            return refused("invalid_arguments")
        self.titles[(str(args["channel_id"]), str(args["thread_ts"]))] = title
        return {"ok": True}

    # -- App Home -----------------------------------------------------------------------

    def m_views_publish(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            view = json_object(args["view"])
        except ValueError:
            return refused("invalid_arguments")
        if view is None or view.get("type") != "home":
            return refused("invalid_arguments")
        blocks = view.get("blocks")
        if not isinstance(blocks, list) or len(blocks) > VIEW_BLOCKS_LIMIT:
            return refused("invalid_arguments")
        user = str(args["user_id"])
        self.views.setdefault(user, []).append(view)
        return {"ok": True, "view": {"id": f"V{user}", "type": "home", "blocks": blocks}}

    def home(self, user: str) -> dict[str, Any] | None:
        """The Home view last published for `user`."""
        published = self.views.get(user)
        return published[-1] if published else None


# -- kept across a restart of local mode (with the messages, in `standin.json`) -----------


def dump_container(api: ContainerMethods) -> dict[str, Any]:
    """Thread titles, agent sessions and suggested prompts, as Slack keeps them."""
    return {
        "titles": [[channel, ts, text] for (channel, ts), text in api.titles.items()],
        "sessions": [dataclasses.asdict(session) for session in api.sessions.values()],
        "prompts": {
            channel: [dataclasses.asdict(shown) for shown in offered]
            for channel, offered in api.prompts.items()
        },
    }


def load_container(api: ContainerMethods, saved: dict[str, Any]) -> None:
    """What `dump_container` kept; a file of an earlier stand-in has none of it."""
    api.titles = {(channel, ts): text for channel, ts, text in saved.get("titles", [])}
    for raw in saved.get("sessions", []):
        session = Session(**{**raw, "statuses": [tuple(s) for s in raw.get("statuses", [])]})
        api.sessions[(session.channel, session.thread_ts)] = session
    api.prompts = {
        channel: [Prompts(**shown) for shown in offered]
        for channel, offered in (saved.get("prompts") or {}).items()
    }
