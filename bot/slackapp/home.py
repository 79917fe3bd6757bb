"""The App Home tab: published for a person when they open it (`app_home_opened`, tab
`home`), and again when what it shows changes: a decision (the decider's and the run
starter's), a new approval request (the run starter's and, bounded, approvers': below);
others see it the next time they open it. Its Approve and Reject buttons are the
thread's own (same action ids and values: the listeners of `listeners` decide them), its
Discard buttons (admins; the stale conversations, idle longer than `BOT_STALE_AFTER`, a day
by default) go through a confirmation dialog and discard only a conversation still as the
tab listed it: paused, idle, nothing since (the runtime checks it under the lease, as
`/agent-admin discard stale` does); one that changed is left alone and the admin told so.

Bounded cost per publish: the person's approvals from the listing (one index query; a few
capped pages for approvers) and one checkpoint read per conversation listed
(`Queries.waiting_for`), one read of their person record and of each of their recent
conversations, and for admins the counts and one bounded list of stale conversations. A
failure to publish is logged; it never touches a run or a decision.

A new request is published after the release that pauses its run (`AwaitingDecision`), not
with its post in the thread, which comes first: a tab read before that release does not list
it. Approvers: at most `APPROVERS_REFRESHED` per request, those who opened their tab here
most recently first (a tab is what someone looks at: whoever opens it later gets it fresh),
so a workspace with many approvers costs the same bounded work per request. One person's
publishes take turns, each reading after the one before has published, so the last view
published is never an older read (a tab opened while a request was being committed is
followed by the one that shows it); refreshes asked while one waits its turn are one."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Collection, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from bot import metrics
from bot.permalink import linker
from bot.runtime import (
    PAUSED,
    AwaitingDecision,
    ConversationRuntime,
    Decided,
    Discarded,
    Listed,
    Refused,
    StaleFilter,
    Waiting,
)
from bot.slackapp.clients import SlackClients, TeamNotInstalled
from bot.slackapp.home_blocks import DISCARD, AdminPart, home_view
from bot.slackapp.live_thread import ERRORS, error_of
from bot.slackapp.teams import SLACK_ID, conversation_enterprise, workspace_url
from storage import ConversationKey, PersonKey, StorageError

log = logging.getLogger(__name__)
STALE_READ = 50  # stale conversations read (of every workspace), of which this one's shown
STALE_SHOWN = 10
DEFAULT_URL = "https://slack.com/"
ON_HOME = "home:"  # the reply_to of a click on the Home tab (which has no response_url)
CHANGED = (
    "Nothing was discarded: that conversation changed after this tab listed it (someone "
    "wrote there, decided, resumed it, or it is running now). Here is where things stand."
)
OUT_OF_DATE = "Nothing was discarded: this tab was out of date. Here is where things stand."
APPROVERS_REFRESHED = 10  # approvers whose tab a new request publishes again
VIEWERS_KEPT = 1000  # people who opened their tab here, most recent last


class HomeTab:
    def __init__(
        self,
        runtime: ConversationRuntime,
        clients: SlackClients,
        admins: frozenset[str],
        *,
        many_workspaces: bool,
    ) -> None:
        self.runtime = runtime
        self.clients = clients
        self.admins = admins
        self.many_workspaces = many_workspaces
        self.urls: dict[str, str] = {}  # workspace -> its URL, learnt from its requests
        self._later: set[asyncio.Task[None]] = set()
        self.viewers: OrderedDict[PersonKey, None] = OrderedDict()  # opened here, newest last
        self._turns: dict[PersonKey, tuple[asyncio.Lock, int]] = {}  # a lock, and its users
        # Refreshes asked and not yet reading, with the conversations that began waiting.
        self._due: dict[PersonKey, set[ConversationKey]] = {}

    def register(self, app: AsyncApp) -> None:
        app.action(DISCARD)(ack=self.ack_at_once, lazy=[self.discard])

    async def ack_at_once(self, ack: Any) -> None:
        await ack()

    def person(self, context: AsyncBoltContext, user: str) -> PersonKey | None:
        """The person a request comes from, in its workspace (as conversation keys name
        it); None when its ids are not Slack's."""
        team = context.team_id or ""
        enterprise = conversation_enterprise(context, many_workspaces=self.many_workspaces)
        if not (SLACK_ID.fullmatch(str(team)) and SLACK_ID.fullmatch(user)):
            return None
        url = workspace_url(context, "")
        if url:
            self.urls[f"{enterprise}:{team}" if enterprise else str(team)] = url
        return PersonKey(team=team, user=user, enterprise=enterprise)

    # -- publishing ---------------------------------------------------------------------

    async def opened(self, person: PersonKey, client: AsyncWebClient) -> None:
        """They opened their tab: published, and they count as looking at it."""
        self.viewers[person] = None
        self.viewers.move_to_end(person)
        if len(self.viewers) > VIEWERS_KEPT:
            self.viewers.popitem(last=False)
        await self.publish(person, client)

    async def publish(
        self, person: PersonKey, client: AsyncWebClient, note: str | None = None
    ) -> None:
        async with self._turn(person):
            await self._publish(person, client, note)

    async def _publish(
        self,
        person: PersonKey,
        client: AsyncWebClient,
        note: str | None,
        including: Collection[ConversationKey] = (),
    ) -> None:
        metrics.EVENTS.labels("home_published").inc()
        try:
            view = await self._view(person, note, including)
            await client.views_publish(user_id=person.user, view=view)
        except (*ERRORS, StorageError) as exc:
            log.warning("%s: the Home tab was not published: %s", person, error_of(exc))

    @asynccontextmanager
    async def _turn(self, person: PersonKey) -> AsyncIterator[None]:
        """One publish at a time for a person, in the order asked (asyncio's locks are
        fair): each reads after the one before it has published."""
        lock, users = self._turns.get(person, (asyncio.Lock(), 0))
        self._turns[person] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._turns[person]
            if users == 1:
                del self._turns[person]
            else:
                self._turns[person] = (lock, users - 1)

    async def _view(
        self, person: PersonKey, note: str | None, including: Collection[ConversationKey]
    ) -> dict[str, Any]:
        rt = self.runtime
        waiting, recent = await asyncio.gather(
            self._waiting(person, including), rt.people.recent_conversations(person)
        )
        if waiting is None:
            waiting, note = [], note or "The approvals waiting on you could not be listed."
        admin = None
        if person.user in self.admins:
            stale = await rt.queries.stale(rt.settings.stale_after, limit=STALE_READ)
            mine = [r for r in stale if PersonKey.of(r.key, person.user) == person]
            admin = AdminPart(
                await rt.queries.counts(), mine[:STALE_SHOWN], rt.settings.stale_after
            )
        workspace = f"{person.enterprise}:{person.team}" if person.enterprise else person.team
        link = linker(self.urls.get(workspace, DEFAULT_URL))
        return home_view(waiting, recent, link, admin, note)

    async def _waiting(
        self, person: PersonKey, including: Collection[ConversationKey]
    ) -> list[Waiting] | None:
        """None when they cannot be listed (e.g. a table still without the approval index,
        an upgrade half done): the rest of the tab is published."""
        try:
            return await self.runtime.queries.waiting_for(person, including)
        except Exception:
            log.exception("%s: the approvals waiting on them could not be listed", person)
            return None

    def after_decision(self, decided: Decided) -> None:
        """A decision was recorded (from the thread or from Home): the decider's Home and
        the run starter's are published again, in the background (delivery goes on)."""
        self._soon(self._after_decision(decided))

    def after_request(self, waiting: AwaitingDecision) -> None:
        """A run now waits for a decision, listed: the tab of the person who started it and
        those of approvers who may decide it (at most `APPROVERS_REFRESHED`, the latest to
        open theirs here first) are published again, in the background."""
        key = waiting.key
        starter = [waiting.requested_by] if SLACK_ID.fullmatch(waiting.requested_by) else []
        approvers = [
            PersonKey.of(key, user) for user in waiting.approvers if SLACK_ID.fullmatch(user)
        ]
        recency = {person: rank for rank, person in enumerate(reversed(self.viewers))}
        approvers.sort(key=lambda person: recency.get(person, len(recency)))  # stable
        people = [PersonKey.of(key, user) for user in starter] + approvers[:APPROVERS_REFRESHED]
        for person in dict.fromkeys(people):
            self._refresh(person, key, waiting=True)

    def _refresh(self, person: PersonKey, key: ConversationKey, *, waiting: bool) -> None:
        """Publish `person`'s tab again (in the background; the client is `key`'s), unless a
        refresh of theirs still waits its turn: that one reads later, and shows this too.
        `waiting`: `key` began waiting just now (listed whether or not the index shows it
        yet)."""
        due = self._due.get(person)
        if due is None:
            due = self._due[person] = set()
            self._soon(self._refreshed(person, key))
        if waiting:
            due.add(key)

    async def _refreshed(self, person: PersonKey, key: ConversationKey) -> None:
        due = self._due[person]
        try:
            client = await self.clients.for_key(key)
            async with self._turn(person):
                del self._due[person]  # a refresh asked from now on reads after this one
                await self._publish(person, client, None, due)
        except (TeamNotInstalled, StorageError) as exc:
            log.info("%s: Home not refreshed: %r", key, exc)
        finally:
            if self._due.get(person) is due:  # never began: the next one asked goes ahead
                del self._due[person]

    def tell(self, refused: Refused) -> None:
        """A click on the Home tab was refused (late, stale, not theirs to decide): the tab
        is published again, saying why, by whichever replica served the thread."""
        if refused.user:
            person = PersonKey.of(refused.key, refused.user)
            self._soon(self._tell(person, refused.key, refused.text))

    async def _tell(self, person: PersonKey, key: ConversationKey, note: str) -> None:
        try:
            client = await self.clients.for_key(key)
        except (TeamNotInstalled, StorageError) as exc:
            log.info("%s: Home not told: %r", key, exc)
            return
        await self.publish(person, client, note)

    def _soon(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._later.add(task)
        task.add_done_callback(self._later.discard)

    async def _after_decision(self, decided: Decided) -> None:
        key = decided.key
        try:
            record = await self.runtime.queries.conversation(key)
        except StorageError as exc:
            log.info("%s: Home not refreshed: %r", key, exc)
            return
        people = {decided.user} | ({record.run_by} if record and record.run_by else set())
        for user in sorted(people):
            self._refresh(PersonKey.of(key, user), key, waiting=False)

    # -- Discard (admins) ---------------------------------------------------------------

    async def discard(
        self, body: dict[str, Any], context: AsyncBoltContext, client: AsyncWebClient
    ) -> None:
        metrics.EVENTS.labels("home_discard").inc()
        user = str((body.get("user") or {}).get("id", ""))
        person = self.person(context, user)
        if person is None:
            return
        if user not in self.admins:
            log.warning("refused a Discard from non-admin %s", user)
            await self.publish(person, client, "Only bot admins may discard; nothing changed.")
            return
        try:
            value = str(body["actions"][0]["value"])
        except (KeyError, IndexError, TypeError):
            await self.publish(person, client, "That button is not one of mine.")
            return
        listed = _listed(value)
        if listed is None:
            await self.publish(person, client, "That button is not one of mine.")
            return
        if isinstance(listed, ConversationKey):  # a tab published before buttons said more
            await self.publish(person, client, OUT_OF_DATE)
            return
        if PersonKey.of(listed.key, user) != person:  # Home lists this workspace's only
            await self.publish(person, client, "That conversation is not of this workspace.")
            return
        # Discarded only if still as listed, checked under the lease: a thread that came
        # back to life since (approved and running, answered, written in) is left alone.
        age = self.runtime.settings.stale_after
        still = StaleFilter(statuses=PAUSED, older_than=age, listed=listed)
        outcomes = await self.runtime.discard(listed.key, by=user, only_if=still)
        if any(isinstance(o, Discarded) for o in outcomes):
            note = "Discarded; the thread was told."
        else:  # refused (e.g. gone), or left alone: nothing was discarded
            note = next((o.text for o in outcomes if isinstance(o, Refused)), CHANGED)
        await self.publish(person, client, note)

    async def close(self) -> None:
        if self._later:
            await asyncio.wait(self._later, timeout=5)


def _listed(value: str) -> Listed | ConversationKey | None:
    """What a Discard button carries: the conversation as listed; a bare key from a tab
    published by an earlier version; None for anything else."""
    try:
        return Listed.model_validate_json(value)
    except ValueError:
        pass
    try:
        return ConversationKey.parse(value)
    except ValueError:
        return None
