"""The workspaces local mode's page shows, each with one channel, and the two people in them.

By default one, with the bot running on a bot token (single-workspace mode). With
`BOT_LOCAL_OAUTH=1` two, and the bot runs as it does when distributed: `SLACK_CLIENT_ID` and
`SLACK_CLIENT_SECRET`, bolt's OAuth flow. Each workspace is then installed from the page: its
Install link opens the bot's `/slack/install`, whose "Add to Slack" goes to the stand-in's
consent page (`oauth`), which sends the browser back to the bot's `/slack/oauth_redirect`
and from there to the page. The tokens the stand-in issued are kept with the page's state
(`standin.json`), so that the installs outlive a Ctrl-C."""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from bot.standin.oauth import Grant
from bot.standin.slack_api import TEAM, SlackWebApi
from bot.standin.view import CHANNEL


@dataclass(frozen=True)
class Place:
    team: str
    name: str  # the workspace's
    channel: str
    channel_name: str


DM_NAME = "agent"  # the DM pane's name on the page: the app's Messages tab
USERS = {"alice": "U0ALICE", "bob": "U0BOB"}  # the only people the page may post as
GENERAL = Place(TEAM, "Local", CHANNEL, "general")
SECOND = Place("T0SECOND", "Second", "C0SECOND", "second")


class Places:
    def __init__(self, api: SlackWebApi, *, oauth: bool, page_url: str, bot_url: str) -> None:
        self.api = api
        self.oauth = oauth
        self.page_url = page_url
        self.bot_url = bot_url  # as the browser reaches it (loopback)
        self.all = [GENERAL, SECOND] if oauth else [GENERAL]
        self.client_id = f"{secrets.randbelow(10**6)}.{secrets.randbelow(10**6)}"
        self.client_secret = secrets.token_hex(16)
        if oauth:
            api.teams[GENERAL.team].channels.add(GENERAL.channel)
            api.add_team(SECOND.team, SECOND.name, channels=(SECOND.channel,))
            api.configure_oauth(
                self.client_id, self.client_secret, f"{bot_url}/slack/oauth_redirect"
            )

    def find(self, team: object) -> Place | None:
        """The workspace `team` names; the first when it names none."""
        if team in (None, ""):
            return self.all[0]
        return next((p for p in self.all if p.team == team), None)

    def dm(self, user: str, place: Place) -> Place:
        """The person's DM with the app in that workspace: a `D…` channel of their own."""
        index = self.all.index(place)
        return dataclasses.replace(place, channel=f"D{index}{user[2:]}", channel_name=DM_NAME)

    def of_channel(self, channel: str) -> Place:
        return next((p for p in self.all if p.channel == channel), self.all[0])

    def bot_env(self) -> dict[str, str]:
        """What the bot needs for installs: the app's client id and secret."""
        if not self.oauth:
            return {}
        return {
            "SLACK_CLIENT_ID": self.client_id,
            "SLACK_CLIENT_SECRET": self.client_secret,
            "SLACK_INSTALL_SUCCESS_URL": self.page_url,
        }

    def view(self) -> list[dict[str, Any]]:
        """For the page: each workspace, whether the app is installed there, and where to
        install it."""
        return [
            {
                "id": p.team,
                "name": p.name,
                "channel": p.channel_name,
                "installed": not self.oauth or self.api.token_of(p.team) is not None,
                "install": f"{self.bot_url}/slack/install?{urlencode({'team': p.team})}",
            }
            for p in self.all
        ]

    def dump(self) -> dict[str, Any]:
        return {"tokens": {t: dataclasses.asdict(g) for t, g in self.api.tokens.items()}}

    def load(self, saved: dict[str, Any]) -> None:
        for token, raw in dict(saved.get("tokens") or {}).items():
            self.api.tokens[str(token)] = Grant(**raw)
