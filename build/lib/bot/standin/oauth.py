"""Installing the app in several workspaces, in the Web API stand-in: Slack's authorize page
(`GET /oauth/v2/authorize`), which sends the browser back to the app's redirect URL with a
one-time code, and `oauth.v2.access`, which trades the code (with the app's client id and
secret, as HTTP Basic auth) for the workspace's bot token, or a refresh token for a new one
when the install rotates tokens. Every token belongs to one workspace (or, for an org-wide
install, to its organisation): the stand-in answers each call for the workspace its token
names, records it on the call (`Call.team`), and refuses a channel of another workspace
(`channel_not_found`), so tests see every call's token. An uninstall revokes the tokens."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import html
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from bot.standin.streams import refused

APP_ID = "A0STANDIN"


@dataclass
class Team:
    """A workspace, or an organisation (`org`: installs there are org-wide)."""

    id: str
    name: str
    enterprise: str | None = None
    org: bool = False
    channels: set[str] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"https://{self.name.lower().replace(' ', '-')}.slack.com/"


@dataclass
class Grant:
    team: str  # a workspace id, or an organisation's for an org-wide install
    scopes: str
    installer: str
    expires_at: float | None = None  # rotating tokens only
    refresh: str | None = None


@dataclass
class OAuthApp:
    client_id: str
    client_secret: str
    redirect_url: str
    rotating: bool = False  # tokens expire after `expires_in` and come with a refresh token
    expires_in: int = 43_200


class OAuthMethods:
    """Mixed into `SlackWebApi`."""

    team: str
    token: str | None
    bot_user: str
    teams: dict[str, Team]
    tokens: dict[str, Grant]  # token -> what it grants
    revoked: set[str]
    oauth_app: OAuthApp | None
    codes: dict[str, Grant]  # one-time codes, until traded
    refresh_tokens: dict[str, Grant]

    def add_team(
        self,
        team: str,
        name: str,
        *,
        channels: tuple[str, ...] = (),
        enterprise: str | None = None,
        org: bool = False,
    ) -> Team:
        """A workspace one can install into (an organisation with `org`); its channels."""
        known = self.teams[team] = Team(team, name, enterprise, org, set(channels))
        return known

    def configure_oauth(
        self, client_id: str, client_secret: str, redirect_url: str, *, rotating: bool = False
    ) -> OAuthApp:
        self.oauth_app = OAuthApp(client_id, client_secret, redirect_url, rotating)
        return self.oauth_app

    def grant_for(self, token: str) -> Grant | None:
        """What `token` grants, if it is one of the stand-in's and still valid."""
        grant = self.tokens.get(token)
        if grant is None or token in self.revoked:
            return None
        if grant.expires_at is not None and grant.expires_at < time.time():
            return None
        return grant

    def token_of(self, team: str) -> str | None:
        """The workspace's (or organisation's) current bot token."""
        found = [t for t, g in self.tokens.items() if g.team == team and self.grant_for(t)]
        return found[-1] if found else None

    def uninstall(self, team: str) -> None:
        """The workspace removes the app: its tokens stop working."""
        self.revoked |= {t for t, grant in self.tokens.items() if grant.team == team}

    def owner_of(self, channel: str) -> Team | None:
        return next((t for t in self.teams.values() if channel in t.channels), None)

    def may_use(self, grant: Grant, channel: str) -> bool:
        """A token reaches its workspace's channels (an org-wide one its organisation's)."""
        owner = self.owner_of(channel)
        if owner is None:
            return True  # a channel nobody declared: any workspace's
        return grant.team in (owner.id, owner.enterprise)

    # -- the browser's side -------------------------------------------------------------

    async def authorize_page(self, request: web.Request) -> web.Response:
        """Slack's consent page: without `team`, a list of workspaces to install into;
        with it, approved at once: back to the app with a one-time code and its `state`."""
        app = self.oauth_app
        query = request.query
        if app is None or query.get("client_id") != app.client_id:
            return web.Response(status=400, text="invalid_client_id")
        team = self.teams.get(query.get("team", ""))
        if team is None:
            return web.Response(text=self._choose_page(dict(query)), content_type="text/html")
        code = secrets.token_urlsafe(16)
        self.codes[code] = Grant(team.id, query.get("scope", ""), query.get("user", "U0ALICE"))
        back = query.get("redirect_uri") or app.redirect_url
        state = {"state": query["state"]} if query.get("state") else {}
        raise web.HTTPFound(f"{back}?{urlencode({'code': code, **state})}")

    def _choose_page(self, query: dict[str, str]) -> str:
        links = "".join(
            f'<li><a href="?{html.escape(urlencode({**query, "team": t.id}))}">'
            f"{html.escape(t.name)}</a>{' (the whole organisation)' if t.org else ''}</li>"
            for t in self.teams.values()
        )
        return (
            "<!doctype html><title>Install the app</title><h1>Install the app</h1>"
            "<p>Where should it be installed? (The stand-in approves at once.)</p>"
            f"<ul>{links}</ul>"
        )

    # -- oauth.v2.access ------------------------------------------------------------------

    def m_oauth_v2_access(self, args: dict[str, Any]) -> dict[str, Any]:
        app = self.oauth_app
        client_id, secret = args.get("_basic") or (args.get("client_id"), args.get("client_secret"))
        if app is None or client_id != app.client_id:
            return refused("invalid_client_id")
        if secret != app.client_secret:
            return refused("bad_client_secret")
        if args.get("grant_type") == "refresh_token":
            old = self.refresh_tokens.pop(str(args.get("refresh_token", "")), None)
            if old is None:
                return refused("invalid_refresh_token")
            # A new token; the old one still works until it expires, as in Slack.
            return self._issue(dataclasses.replace(old), rotate=True)
        grant = self.codes.pop(str(args.get("code", "")), None)
        if grant is None:
            return refused("invalid_code")
        return self._issue(grant, rotate=False)

    def _issue(self, grant: Grant, *, rotate: bool) -> dict[str, Any]:
        app = self.oauth_app
        assert app is not None
        team = self.teams[grant.team]
        token = None if app.rotating else self.token_of(team.id)  # Slack keeps a bot token
        if token is None:
            token = f"xoxb-{team.id.lower()}-{secrets.token_hex(8)}"
        if app.rotating:
            grant.expires_at = time.time() + app.expires_in
            grant.refresh = f"xoxe-1-{secrets.token_hex(8)}"
            self.refresh_tokens[grant.refresh] = grant
        self.tokens[token] = grant
        answer: dict[str, Any] = {
            "ok": True,
            "access_token": token,
            "token_type": "bot",
            "app_id": APP_ID,
        }
        if app.rotating:
            answer |= {"refresh_token": grant.refresh, "expires_in": app.expires_in}
        if rotate:
            return answer
        enterprise = team.enterprise or (team.id if team.org else None)
        return answer | {
            "scope": grant.scopes,
            "bot_user_id": self.bot_user,
            "team": None if team.org else {"id": team.id, "name": team.name},
            "enterprise": {"id": enterprise, "name": enterprise} if enterprise else None,
            "is_enterprise_install": team.org,
            "authed_user": {"id": grant.installer},
        }


def basic_auth(header: str) -> tuple[str, str] | None:
    """`Authorization: Basic …` as (client id, client secret)."""
    if not header.startswith("Basic "):
        return None
    try:
        client_id, _, secret = base64.b64decode(header[6:]).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return client_id, secret
