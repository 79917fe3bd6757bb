"""The page's endpoints for Slack's agent container, sent to the bot as Slack sends them:
opening the app's Messages or Home tab (`app_home_opened`), Slack's own stop on a thread's
agent session (the streams end, then `agent_session_stopped`), and a click on a button of the
Home view (`block_actions` from a view: no message, no response_url). The page's guard and
what a request may name are `page_input`'s; the outbox is the workspace's."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot.standin.errors import PageRequestRefused
from bot.standin.page_input import json_body, text_field, user_id
from bot.standin.requests import agent_session_stopped, app_home_opened, view_actions

if TYPE_CHECKING:
    from bot.standin.workspace import Workspace

TABS = ("messages", "home")


class ContainerRoutes:
    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/ui/open", self.open_tab),
            web.post("/ui/session-stop", self.stop_session),
            web.post("/ui/home-click", self.home_click),
        ]

    async def open_tab(self, request: web.Request) -> web.Response:
        """The person opens the app's Messages tab (its DM, the agent's container) or its
        Home tab: Slack says so each time."""
        space = self.workspace
        data = await json_body(request)
        user = user_id(data.get("user"))
        tab = data.get("tab")
        if tab not in TABS:
            raise PageRequestRefused(400, f"tab: one of {', '.join(TABS)}")
        place = space.names.place(data.get("team"))
        dm = space.places.dm(user, place)
        event = app_home_opened(user=user, channel=dm.channel, tab=str(tab)) | {"team": place.team}
        self._event(place.team, user, event, label=f"opening {tab}")
        return web.json_response({"ok": True})

    async def stop_session(self, request: web.Request) -> web.Response:
        """Slack's stop, pressed on a thread's session while it is `processing`."""
        space = self.workspace
        data = await json_body(request)
        user = user_id(data.get("user"))
        place = space.names.place(data.get("team"), data.get("pane"), user)
        thread_ts = space.names.thread(data.get("thread_ts"), place)
        session = space.api.session(place.channel, thread_ts) if thread_ts else None
        if thread_ts is None or session is None or session.status != "processing":
            raise PageRequestRefused(400, "nothing is working there to stop")
        streams = space.api.stop_session(place.channel, thread_ts)
        event = agent_session_stopped(
            user=user, channel=place.channel, thread_ts=thread_ts, streams=streams
        )
        self._event(place.team, user, event | {"team": place.team}, label="Stop")
        return web.json_response({"ok": True})

    async def home_click(self, request: web.Request) -> web.Response:
        """A button of the person's Home view: sent with the view it was clicked on."""
        space = self.workspace
        data = await json_body(request)
        user = user_id(data.get("user"))
        place = space.names.place(data.get("team"))
        action_id = text_field(data, "action_id", 255)
        value = text_field(data, "value", 2000)
        view = space.api.home(user)
        block_id = _block_of(view, action_id, value)
        if view is None or block_id is None:
            raise PageRequestRefused(400, "no such button on your Home tab")
        body = view_actions(
            team=place.team,
            user=user,
            view={"id": f"V{user}", "blocks": view.get("blocks", [])},
            action_id=action_id,
            value=value,
            block_id=block_id,
        )
        space.outbox.enqueue(
            {
                "kind": "form",
                "team": place.team,
                "user": user,
                "thread_ts": None,
                "channel": "home",
                "body": body,
                "label": text_field(data, "label", 100) or action_id,
            }
        )
        return web.json_response({"ok": True})

    def _event(self, team: str, user: str, event: dict[str, Any], *, label: str) -> None:
        self.workspace.outbox.enqueue(
            {
                "kind": "event",
                "team": team,
                "user": user,
                "ts": "",
                "thread_ts": event.get("thread_ts"),
                "channel": event.get("channel"),
                "event": event,
                "event_id": f"Ev{uuid.uuid4().hex[:12]}",
                "label": label,
            }
        )


def _block_of(view: dict[str, Any] | None, action_id: str, value: str) -> str | None:
    """The block id of the view's button with that action and value (by its place when it
    has none, as Slack makes one up)."""
    for index, block in enumerate((view or {}).get("blocks") or []):
        for element in [*block.get("elements", []), block.get("accessory") or {}]:
            if element.get("action_id") == action_id and str(element.get("value", "")) == value:
                return str(block.get("block_id") or f"b{index}")
    return None
