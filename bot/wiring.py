"""The one place the bot is put together: the operator's agent loaded and guarded, the
runtime over the store the caller opened, and for Slack, in order: the storage bridge, the
workspace's clients (and, for many workspaces, the installations kept in the same store), the
runtime's ports (what a run shows, where its outcomes go, what Slack can tell it about a
thread), the runtime built whole on them, the Home tab and the bolt app. `server.run` then
serves what is built here."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import aiohttp
from agents import Agent

from bot import metrics
from bot.agent_loader import load_agent
from bot.runtime import (
    AwaitingDecision,
    ContextSource,
    ConversationRuntime,
    Decided,
    OutcomeSink,
    Progress,
    Refused,
    guard_agent,
)
from bot.settings import RuntimeSettings
from bot.slackapp.app import build_app, web_api_session, web_client
from bot.slackapp.clients import OneWorkspace, SlackClients, own_ids
from bot.slackapp.conversation_source import SlackSource
from bot.slackapp.home import HomeTab
from bot.slackapp.live import LiveThreads
from bot.slackapp.oauth import installs
from bot.slackapp.poster import SlackPoster
from bot.slackapp.server import SlackBot, run
from bot.slackapp.settings import SlackSettings
from bot.suggestions import load_suggestions
from bot.tracing import configure_tracing
from storage import Store
from storage.calls import StorageCalls


def checked_agent(runtime: RuntimeSettings) -> Agent[Any]:
    """The operator's agent, loaded and guarded: raises at once for one the bot cannot run
    (before any storage is opened, so the refusal is the process's only word)."""
    return guard_agent(load_agent(runtime.agent))


def build_runtime(
    store: Store,
    runtime: RuntimeSettings,
    *,
    on_outcome: OutcomeSink | None = None,
    storage_calls: StorageCalls | None = None,
) -> ConversationRuntime:
    """The operator's runtime outside a Slack server (the admin command line): its outcomes
    go to `on_outcome` (notices posted with the bot's token), or nowhere."""
    configure_tracing(runtime.tracing, runtime.trace_processors)
    return ConversationRuntime(
        store, checked_agent(runtime), runtime, on_outcome=on_outcome, storage_calls=storage_calls
    )


class MakeRuntime(Protocol):
    """Builds the runtime over the store, given the Slack layer's ports (e.g. `wiring`'s
    runtime for the operator's agent, or a test's runtime for its own agent)."""

    def __call__(
        self,
        *,
        storage_calls: StorageCalls,
        on_outcome: OutcomeSink,
        progress: Progress,
        source: ContextSource,
    ) -> ConversationRuntime: ...


def slack_runtime(store: Store, runtime: RuntimeSettings, agent: Agent[Any]) -> MakeRuntime:
    """The operator's runtime for Slack, checked now (tracing, the container's suggested
    prompts: a mistake is a configuration error before anything is served), built once the
    Slack layer's ports exist."""
    configure_tracing(runtime.tracing, runtime.trace_processors)
    load_suggestions(runtime.agent)

    def make(
        *,
        storage_calls: StorageCalls,
        on_outcome: OutcomeSink,
        progress: Progress,
        source: ContextSource,
    ) -> ConversationRuntime:
        return ConversationRuntime(
            store,
            agent,
            runtime,
            storage_calls=storage_calls,
            on_outcome=on_outcome,
            progress=progress,
            source=source,
        )

    return make


async def serve_slack(
    settings: SlackSettings,
    store: Store,
    make_runtime: MakeRuntime,
    admins: frozenset[str] | None = None,
    *,
    stop: asyncio.Event | None = None,
    host: str | None = None,
    own_process: bool = False,
) -> None:
    """Assemble the bot and serve it until `stop` is set (or SIGTERM/SIGINT when no event
    is given). `own_process`: the process does nothing else (`python -m bot serve`), so its
    heap is frozen once warm."""
    async with web_api_session() as session:
        bot = await assemble_slack(settings, store, make_runtime, session, admins)
        try:
            await run(bot, stop=stop, host=host, own_process=own_process)
        finally:
            await bot.runtime.close()  # the agents' MCP servers (a stdio server's process ends)


async def assemble_slack(
    settings: SlackSettings,
    store: Store,
    make_runtime: MakeRuntime,
    session: aiohttp.ClientSession,
    admins: frozenset[str] | None = None,
) -> SlackBot:
    """The bot for `settings` over `store`. One workspace asks Slack who it is first
    (auth.test: the token, the workspace's URL for thread links, the bot's own ids); many
    workspaces have no one token, and keep their installations in `store`."""
    client = web_client(settings, session)
    storage_calls = StorageCalls(
        store
    )  # one storage pool per process, the runtime's and the installs'
    metrics.watch_storage(store)
    many = installs(settings, store, storage_calls, client) if settings.many_workspaces else None
    identity = None if many else await client.auth_test()
    workspace_url = str((identity and identity.get("url")) or "https://slack.com/")
    clients: SlackClients = many.clients if many else OneWorkspace(client, own_ids(identity))
    live = LiveThreads(clients)
    home: HomeTab | None = None  # built on the runtime, which the poster's outcomes come from

    def after_decision(decided: Decided) -> None:
        if home is not None:
            home.after_decision(decided)

    def on_home(refused: Refused) -> None:
        if home is not None:
            home.tell(refused)

    def after_request(waiting: AwaitingDecision) -> None:
        if home is not None:
            home.after_request(waiting)

    poster = SlackPoster(
        clients,
        live,
        recheck_after=settings.duplicate_check_seconds,
        after_decision=after_decision,
        on_home=on_home,
        after_request=after_request,
    )
    runtime = make_runtime(
        storage_calls=storage_calls,
        on_outcome=poster,
        progress=live,
        source=SlackSource(settings, clients, session=session),
    )
    admins = admins or runtime.settings.admins
    home = HomeTab(runtime, clients, admins, many_workspaces=bool(many))
    app = build_app(
        settings,
        runtime,
        client,
        admins,
        workspace_url,
        identity,
        installs=many,
        live=live,
        home=home,
    )
    return SlackBot(settings, runtime, app, poster, home)
