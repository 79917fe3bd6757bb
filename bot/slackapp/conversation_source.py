"""What Slack can tell the runtime about a conversation (`bot.runtime.context_source`): a
thread's earlier messages (`conversations.replies`), people's display names (`users.info`,
cached), and the bytes of shared files (`url_private`, with the bot token; `files:read`).

Slack allows apps outside its Marketplace very few `conversations.replies` calls a minute.
Reading a thread's earlier messages happens once per conversation, with its own client that
does not wait out a 429: a refusal becomes `Unavailable` at once (the runtime goes on without
and says so in the thread), and no further read is tried until Slack's `Retry-After` has
passed. The client the poster uses keeps its retries for its own reads."""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from pydantic import ValidationError
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from bot.runtime import EarlierMessage, SharedFile, ThreadHistory, Unavailable
from bot.slackapp.clients import SlackClients, TeamNotInstalled
from bot.slackapp.settings import SlackSettings
from storage import ConversationKey

log = logging.getLogger(__name__)
PAGE = 200  # Slack gives apps outside the Marketplace at most 15 a page
PAGES = 3  # a long thread: its first pages (the runtime keeps the first and latest messages)
NAME_SECONDS = 3600.0  # how long a display name is reused
UNKNOWN_SECONDS = 300.0  # how long a name users.info did not give stays unknown
FILE_HOSTS = {"files.slack.com"}
# Messages that are not something a person said in the thread.
SKIPPED_SUBTYPES = {"channel_join", "channel_leave", "thread_broadcast_deleted", "tombstone"}


class SlackSource:
    """Reads with the token of the conversation's workspace (`clients`), so that it serves
    one workspace or many alike."""

    def __init__(
        self,
        settings: SlackSettings,
        clients: SlackClients,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.clients = clients
        # A 429 is an answer here (see the module's docstring), not something to wait out.
        # No token of its own: each call names its workspace's.
        self.client = AsyncWebClient(
            base_url=settings.api_url,
            session=session,
            retry_handlers=[AsyncConnectionErrorRetryHandler(max_retry_count=2)],
        )
        api = urlsplit(settings.api_url)
        self.api_origin = (api.scheme, api.netloc)  # the stand-in serves files there too
        self.names: dict[tuple[str | None, str, str], tuple[float, str | None]] = {}
        self.quiet_until = 0.0  # after a 429: Slack's Retry-After

    async def _token(self, key: ConversationKey) -> str:
        try:
            client = await self.clients.for_key(key)
        except TeamNotInstalled:
            raise Unavailable("the app is not installed in this workspace") from None
        return client.token or ""

    async def _bot_user(self, key: ConversationKey) -> str | None:
        """The bot's own user id in the conversation's workspace (asked once)."""
        try:
            identity = await self.clients.identity(key)
        except TeamNotInstalled:
            return None
        return identity.user_id if identity else None

    async def earlier_messages(self, key: ConversationKey, before: str) -> ThreadHistory:
        if time.monotonic() < self.quiet_until:
            raise Unavailable("Slack limits how often I may read a thread; it asked me to wait")
        token = await self._token(key)
        bot_user = await self._bot_user(key)
        messages: list[EarlierMessage] = []
        cursor: str | None = None
        for _ in range(PAGES):
            try:
                page = await self.client.conversations_replies(
                    token=token,
                    channel=key.channel,
                    ts=key.thread_ts,
                    latest=before,
                    inclusive=False,
                    limit=PAGE,
                    cursor=cursor,
                )
            except SlackApiError as exc:
                why = self._refusal(exc)
                if not messages:
                    raise Unavailable(why) from None
                return ThreadHistory(messages, complete=False, why=why)
            messages += [m for raw in page.get("messages") or [] if (m := _earlier(raw, bot_user))]
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                return ThreadHistory(messages)
        return ThreadHistory(messages, complete=False, why="the thread is long")

    def _refusal(self, exc: SlackApiError) -> str:
        error = str(exc.response.get("error") or "")
        if exc.response.status_code == 429 or error == "ratelimited":
            retry_after = exc.response.headers.get("Retry-After") or exc.response.headers.get(
                "retry-after"
            )
            try:
                wait = float(retry_after) if retry_after else 60.0
            except ValueError:
                wait = 60.0
            self.quiet_until = time.monotonic() + wait
            return "Slack limits how often I may read a thread"
        log.warning("conversations.replies refused: %s", error)
        if error in ("missing_scope", "not_in_channel", "channel_not_found"):
            return "I may not read this conversation's history"
        return "Slack refused to give them to me"

    async def display_name(self, key: ConversationKey, user: str) -> str | None:
        person_in = (key.enterprise, key.team, user)
        cached = self.names.get(person_in)
        if cached and time.monotonic() - cached[0] < NAME_SECONDS:
            return cached[1]
        try:
            found = await self.client.users_info(user=user, token=await self._token(key))
        except (SlackApiError, Unavailable) as exc:
            why = exc.response.get("error") if isinstance(exc, SlackApiError) else exc
            log.info("users.info %s: %s", user, why)
            # Not known for a while (not an hour): a name that could not be had is asked
            # again later, not on every message (users.info is rate limited too).
            self.names[person_in] = (time.monotonic() - NAME_SECONDS + UNKNOWN_SECONDS, None)
            return None
        person = found.get("user") or {}
        profile = person.get("profile") or {}
        name = (
            profile.get("display_name")
            or profile.get("real_name")
            or person.get("real_name")
            or person.get("name")
        )
        self.names[person_in] = (time.monotonic(), str(name) if name else None)
        return self.names[person_in][1]

    async def download(self, key: ConversationKey, file: SharedFile, limit: int) -> bytes:
        """The file's bytes from its `url_private`, sent the bot token only on Slack's own
        hosts (or the stand-in's)."""
        url = urlsplit(file.url)
        slack = url.scheme == "https" and url.netloc in FILE_HOSTS
        if not slack and (url.scheme, url.netloc) != self.api_origin:
            raise Unavailable("it is not stored where Slack keeps files")
        headers = {"Authorization": f"Bearer {await self._token(key)}"}
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.get(file.url, headers=headers) as response,
            ):
                if response.status != 200:
                    raise Unavailable(f"Slack answered {response.status} to the download")
                if response.content_type == "text/html" and "html" not in file.mimetype:
                    raise Unavailable("Slack did not let me download it (files:read)")
                data = bytearray()
                async for chunk in response.content.iter_chunked(64 * 1024):
                    data += chunk
                    if len(data) > limit:
                        raise Unavailable("it is larger than it said")
                return bytes(data)
        except aiohttp.ClientError as exc:
            log.warning("%s: downloading %s failed: %r", key, file.id, exc)
            raise Unavailable("the download failed") from None


def _earlier(raw: dict[str, Any], bot_user: str | None) -> EarlierMessage | None:
    if raw.get("subtype") in SKIPPED_SUBTYPES or not raw.get("ts"):
        return None
    bot_id = raw.get("bot_id")
    user = str(raw.get("user") or bot_id or "")
    if not user:
        return None
    files = tuple(str(f.get("name") or "a file") for f in raw.get("files") or [])
    name = raw.get("username") or (raw.get("bot_profile") or {}).get("name")
    return EarlierMessage(
        user=user,
        text=str(raw.get("text") or ""),
        ts=str(raw["ts"]),
        name=str(name) if name else None,
        by_bot=bool(bot_id),
        by_us=bot_user is not None and user == bot_user,
        files=files,
    )


def shared_files(event: dict[str, Any]) -> list[SharedFile]:
    """The files a message event carries, as the runtime describes them; files Slack gives
    no download address for (deleted, or external) are left out."""
    found: list[SharedFile] = []
    for raw in event.get("files") or []:
        if not isinstance(raw, dict) or raw.get("mode") == "tombstone":
            continue
        url = raw.get("url_private_download") or raw.get("url_private")
        try:
            found.append(
                SharedFile(
                    id=str(raw.get("id") or ""),
                    name=str(raw.get("name") or raw.get("title") or "file")[:255],
                    mimetype=str(raw.get("mimetype") or "")[:127],
                    size=int(raw.get("size") or 0),
                    url=str(url or ""),
                )
            )
        except (ValidationError, ValueError, TypeError):
            log.warning("ignored a shared file Slack described oddly")
    return [f for f in found if f.url and f.id]
