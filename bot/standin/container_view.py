"""What local mode's page shows of Slack's agent container, as `/ui/state` sends it: each
person's DM with the app (its threads, titled as `assistant.threads.setTitle` says, and the
suggested prompts still on offer), each thread's agent session (its status, and Slack's stop
while it is `processing`), and the Home view last published for the person, with its blocks
made ready to draw as messages' are. Also which threads still work: a Stop offer of the
bot's own is shown only there (Slack drops an offer that no longer applies)."""

from __future__ import annotations

from typing import Any

from bot.standin.container import Prompts
from bot.standin.local_workspaces import Place
from bot.standin.slack_api import SlackWebApi
from bot.standin.view import blocks_view

SESSION_SAYS = {
    "active": "agent is ready",
    "processing": "agent is working on it…",
    "suspended": "agent is waiting for a decision",
    "closed": "",
}
STOP_ACTION = "stop_run"  # the bot's own Stop offer (bot.slackapp.agent_blocks.STOP)


def session_view(api: SlackWebApi, channel: str, thread_ts: str) -> dict[str, Any] | None:
    session = api.session(channel, thread_ts)
    if session is None or session.status == "closed":
        return None
    return {
        "status": session.status,
        "text": SESSION_SAYS.get(session.status, session.status),
        "stop": session.status == "processing",  # Slack shows its stop control then only
    }


def with_sessions(
    api: SlackWebApi, threads: list[dict[str, Any]], channel: str
) -> list[dict[str, Any]]:
    """The threads, each with its session and the title Slack gives it (a session's, or an
    assistant thread's), when it has one."""
    shown = []
    for thread in threads:
        session = api.session(channel, thread["ts"])
        named = api.titles.get((channel, thread["ts"])) or (session.title if session else None)
        shown.append(
            thread
            | {
                "session": session_view(api, channel, thread["ts"]),
                "named": named,
                "title": named or thread["title"],
            }
        )
    return shown


def prompts_view(api: SlackWebApi, channel: str) -> dict[str, Any] | None:
    """The suggested prompts on offer under the DM's greeting: the last set for the
    channel, each until it is used (its message sent there since); whatever else the person
    writes leaves them on offer. `after` is the bot's message they were set under."""
    offered: list[Prompts] = [p for p in api.prompts.get(channel, []) if p.thread_ts is None]
    if not offered:
        return None
    latest = offered[-1]
    sent = {
        m.text.strip()
        for m in api.messages.values()
        if m.channel == channel and m.user != api.bot_user and _order(m.ts) > _order(latest.ts)
    }
    left = [p for p in latest.prompts if p["message"].strip() not in sent]
    if not left:
        return None
    before = [
        m.ts
        for m in api.messages.values()
        if m.channel == channel
        and m.user == api.bot_user
        and not m.thread_ts
        and _order(m.ts) < _order(latest.ts)
    ]
    after = max(before, key=_order) if before else None
    return {"title": latest.title, "prompts": left, "after": after}


def _order(ts: str) -> tuple[int, ...]:
    return tuple(int(part) for part in ts.split(".") if part.isdigit())


def home_view(api: SlackWebApi, user: str) -> dict[str, Any] | None:
    view = api.home(user)
    if view is None:
        return None
    return {"id": f"V{user}", "blocks": blocks_view(list(view.get("blocks") or []), {})}


def working(api: SlackWebApi, channel: str, thread_ts: str | None, now: float) -> bool:
    """The thread's run still works: a status line, a stream or a processing session."""
    if thread_ts is None:
        return False
    session = api.session(channel, thread_ts)
    if session is not None and session.status == "processing":
        return True
    if api.status(channel, thread_ts, now) is not None:
        return True
    return any(
        m.streaming and m.channel == channel and m.thread_ts == thread_ts
        for m in api.messages.values()
    )


def current_offers(
    api: SlackWebApi, ephemerals: list[dict[str, Any]], channel: str, now: float
) -> list[dict[str, Any]]:
    """This person's messages without Stop offers that no longer apply: one whose run
    ended, and one a newer offer in the same thread replaced."""
    newest: dict[Any, int] = {}
    for index, shown in enumerate(ephemerals):
        if _offers_stop(shown):
            newest[shown["thread_ts"]] = index
    return [
        shown
        for index, shown in enumerate(ephemerals)
        if not _offers_stop(shown)
        or (newest[shown["thread_ts"]] == index and working(api, channel, shown["thread_ts"], now))
    ]


def _offers_stop(shown: dict[str, Any]) -> bool:
    return any(
        element.get("action_id") == STOP_ACTION
        for block in shown.get("blocks") or []
        for element in block.get("elements", [])
        if isinstance(element, dict)
    )


def container_state(
    api: SlackWebApi, dm: Place, user: str, threads: list[dict[str, Any]]
) -> dict[str, Any]:
    """The DM pane's part of the page's state (its threads made by `threads_view`)."""
    return {
        "dm": {
            "channel": dm.channel,
            "threads": with_sessions(api, threads, dm.channel),
            "prompts": prompts_view(api, dm.channel),
        },
        "home": home_view(api, user),
    }
