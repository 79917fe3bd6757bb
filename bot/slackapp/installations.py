"""slack_sdk's installation store over this project's storage (the conversations' DynamoDB
table, or the local backend), for bolt's OAuth flow and for the tokens every outgoing call
uses (`clients`). The flow's states are signed, not stored (`oauth_state`).

One document per workspace, or per organisation for an org-wide (Enterprise Grid) install:
the latest installation, whole. A re-install (with changed scopes, say) replaces it: the
latest wins. Storage calls run on the runtime's storage threads (`StorageCalls`), never on the
event loop; a storage failure while keeping an installation is bolt's `BoltError`, so bolt
shows its plain failure page."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from slack_bolt.error import BoltError
from slack_sdk.oauth.installation_store import Bot, Installation
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore

from storage import StorageError, Store
from storage.calls import StorageCalls

log = logging.getLogger(__name__)
NONE = "-"  # stands for an absent enterprise or team in an installation id
FORMAT = 1
# Seconds by which an installation may postdate an uninstall event and still be the one it
# was sent for: Slack's `event_time` is whole seconds, by Slack's clock, and an
# installation's `installed_at` is by ours.
SKEW = 5.0
# The bot fields a rotated token changes (see `async_save_bot`).
BOT_FIELDS = ("bot_token", "bot_id", "bot_user_id", "bot_scopes", "bot_refresh_token")


def install_id(
    enterprise_id: str | None, team_id: str | None, is_enterprise_install: bool | None = False
) -> str:
    """`<enterprise>:<team>`, `-` for what is absent; an org-wide install is its
    organisation's alone (`E…:-`)."""
    team = None if is_enterprise_install else team_id
    return f"{enterprise_id or NONE}:{team or NONE}"


def _plain(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot keep a {type(value).__name__}")


def encode(installation: Installation) -> str:
    return json.dumps(
        {"format": FORMAT, "installation": installation.to_dict_for_copying()},
        default=_plain,
        separators=(",", ":"),
    )


def decode(document: str) -> Installation:
    data: dict[str, Any] = json.loads(document)["installation"]
    return Installation(**data)


class StoredInstallations(AsyncInstallationStore):
    def __init__(self, store: Store, calls: StorageCalls | None = None) -> None:
        self.store = store
        self.calls = calls or StorageCalls(store)

    @property
    def logger(self) -> logging.Logger:
        return log

    async def async_save(self, installation: Installation) -> None:
        ids = install_id(
            installation.enterprise_id, installation.team_id, installation.is_enterprise_install
        )
        try:
            await self.calls(self.store.save_installation, ids, encode(installation))
        except StorageError as exc:
            log.error("could not keep the installation of %s: %r", ids, exc)
            raise BoltError("the installation could not be kept; try again") from exc
        log.info("installed in %s (scopes: %s)", ids, ",".join(installation.bot_scopes or []))

    async def async_save_bot(self, bot: Bot) -> None:
        """A rotated bot token: into the installation it belongs to."""
        found = await self._find(bot.enterprise_id, bot.team_id, bot.is_enterprise_install)
        if found is None:
            found = Installation(
                app_id=bot.app_id,
                enterprise_id=bot.enterprise_id,
                enterprise_name=bot.enterprise_name,
                team_id=bot.team_id,
                team_name=bot.team_name,
                user_id=bot.bot_user_id,
                is_enterprise_install=bot.is_enterprise_install,
                installed_at=bot.installed_at,
            )
        for name in BOT_FIELDS:
            setattr(found, name, getattr(bot, name))
        found.bot_token_expires_at = bot.bot_token_expires_at
        await self.async_save(found)

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        """The latest installation; with `user_id`, only if that person made it (the bot
        keeps no other installer's)."""
        found = await self._find(enterprise_id, team_id, is_enterprise_install)
        if found is None or (user_id is not None and found.user_id != user_id):
            return None
        return found

    async def async_find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        found = await self._find(enterprise_id, team_id, is_enterprise_install)
        if found is None or not found.bot_token:
            return None
        return found.to_bot()

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        """Without its bot the installation is of no use to this app: all of it goes."""
        await self._delete(enterprise_id, team_id)

    async def async_delete_installation(
        self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None
    ) -> None:
        """With `user_id`, only that person's user token goes (the bot stays)."""
        if user_id is None:
            await self._delete(enterprise_id, team_id)
            return
        found = await self._find(enterprise_id, team_id, team_id is None)
        if found is not None and found.user_id == user_id and found.user_token:
            found.user_token = found.user_refresh_token = None
            found.user_token_expires_at = None
            await self.async_save(found)

    async def async_delete_all(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await self._delete(enterprise_id, team_id)

    async def delete_unless_newer(
        self, *, enterprise_id: str | None, team_id: str | None, than: float | None
    ) -> bool:
        """An uninstall sent at `than` (epoch seconds; None: unknown) applies to the
        installation it was sent for: that one is deleted, one installed after it is kept.
        True when no installation newer than the uninstall stands (none was there, or the
        one there is deleted now)."""
        ids = install_id(enterprise_id, team_id)
        while (document := await self.calls(self.store.find_installation, ids)) is not None:
            try:
                installed_at = decode(document).installed_at
            except (ValueError, KeyError, TypeError):  # unreadable: as good as not installed
                installed_at = None
            if than is not None and installed_at is not None and installed_at > than + SKEW:
                log.info("kept the installation of %s: installed after the uninstall", ids)
                return False
            if await self.calls(self.store.delete_installation, ids, only=document):
                log.info("uninstalled from %s", ids)
                return True
            # Saved again since it was read (a re-install, a rotated token): look again.
        return True

    async def _find(
        self, enterprise_id: str | None, team_id: str | None, is_enterprise_install: bool | None
    ) -> Installation | None:
        ids = install_id(enterprise_id, team_id, is_enterprise_install)
        document = await self.calls(self.store.find_installation, ids)
        if document is None:
            return None
        try:
            return decode(document)
        except (ValueError, KeyError, TypeError) as exc:  # unreadable: as if not installed
            log.error("the installation of %s cannot be read: %r", ids, exc)
            return None

    async def _delete(self, enterprise_id: str | None, team_id: str | None) -> None:
        ids = install_id(enterprise_id, team_id)
        if await self.calls(self.store.delete_installation, ids):
            log.info("uninstalled from %s", ids)
