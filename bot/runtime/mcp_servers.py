"""MCP servers, managed by the bot: the servers declared on any agent of the graph (stdio,
streamable HTTP, SSE), each once, connected with the SDK's `MCPServerManager` (one per
server, each on its own worker task, so that a connection opened while one thread is served
outlives that serve and is closed from any task).

- `start` connects every server (in parallel) and lists its tools, before the process
  reports healthy; the listings (names and input schemas) are part of the agent
  fingerprint (`on_change` tells the runtime when they change). A server that does not
  answer is retried in the background, with backoff.
- While it runs, each server is checked every `check_interval` (a ping), and a request that
  finds its connection gone marks it down at once; a server that is down is reconnected
  with backoff (1 s doubling to 30 s) and listed again.
- A run that lists or calls the tools of a server that is down raises `McpServerDown`
  (nothing was sent): the runtime pauses it as interrupted (`paused_for`), with its messages
  still queued and its checkpoint as it was, and continues it here when the server is back
  (`on_back`), or on the next message or `/resume` (after a restart, too).
- `close` (graceful stop) cleans every server up: a stdio server's process is stopped
  (stdin closed, then SIGTERM, then SIGKILL, by the MCP client). A bot killed outright
  leaves no stdio server behind either: it exits when its stdin pipe closes.

The servers' own `list_tools` and `call_tool` are wrapped on the instances (the SDK calls
them there), so that the guard (`guard`) can tell a call that was never sent from one whose
connection failed while it ran, or that got no answer within the client's read timeout
(`client_session_timeout_seconds`: the server is slow, not down, and the call may have
happened); the failures themselves are told apart in `mcp_failures`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

from agents import Agent
from agents.exceptions import UserError
from agents.mcp import MCPServer, MCPServerManager
from agents.mcp._logging import get_mcp_server_log_name

from bot.runtime.mcp_failures import (
    SEEN_DOWN,
    McpServerDown,
    answered,
    connection_lost,
    plain,
    timed_out,
)
from bot.runtime.outcomes import Notice, NoticeKind, Outcome
from bot.runtime.pass_results import Paused
from bot.runtime.tool_failures import CURRENT_CALL, CallWatch, NoAnswer
from storage import ConversationKey

log = logging.getLogger(__name__)
CONNECT_SECONDS = 10.0  # to connect, and to list the tools after
PING_SECONDS = 5.0
BACKOFF_FIRST = 1.0
BACKOFF_MOST = 30.0
MANAGED = "_bot_managed"  # on a server: its `ManagedServer`


def managed_of(server: object) -> ManagedServer | None:
    found = getattr(server, MANAGED, None)
    return found if isinstance(found, ManagedServer) else None


def listing_of(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """What the fingerprint keeps of a server's tools: names and input schemas."""
    listed = []
    for tool in tools:
        dumped = tool.model_dump(by_alias=True, mode="json")
        listed.append({"name": tool.name, "inputSchema": dumped.get("inputSchema")})
    return sorted(listed, key=lambda entry: str(entry["name"]))


class ManagedServer:
    """One server: its connection (an `MCPServerManager` of its own), whether it is up,
    the tools it listed when it last connected, and when to try it again."""

    def __init__(self, server: MCPServer, owner: McpServers) -> None:
        self.server = server
        self.name = server.name  # as the fingerprint names it
        self.label = get_mcp_server_log_name(server.name)  # for people and logs
        self.manager = MCPServerManager(
            [server],
            connect_timeout_seconds=CONNECT_SECONDS,
            cleanup_timeout_seconds=CONNECT_SECONDS,
            connect_in_parallel=True,  # its own worker task: connect and clean up from any task
            suppress_cancelled_error=False,
        )
        self.owner = owner
        self.up = False
        self.listing: list[dict[str, Any]] | None = None
        self.delay = BACKOFF_FIRST
        self.tried_at = -BACKOFF_FIRST
        self.retry_at = 0.0
        self.ping_at = 0.0
        self.in_flight = 0  # calls waiting for an answer (a busy server may answer pings late)
        self._connecting = asyncio.Lock()
        earlier = managed_of(server)  # managed before (a runtime built again in a process)
        self._list: Callable[..., Awaitable[Any]] = earlier._list if earlier else server.list_tools
        self._call: Callable[..., Awaitable[Any]] = earlier._call if earlier else server.call_tool
        # The SDK calls these on the instance: ours come first.
        server.list_tools = self.list_tools  # type: ignore[method-assign]
        server.call_tool = self.call_tool  # type: ignore[method-assign]
        setattr(server, MANAGED, self)

    async def revive(self, *, due: bool = False) -> bool:
        """Up, or connected again now: by the watcher when its backoff is `due`, else by a
        run that needs it (at most once a second). False when it is still down."""
        async with self._connecting:
            if self.up:
                return True
            now = time.monotonic()
            too_soon = now < self.retry_at if due else now - self.tried_at < BACKOFF_FIRST
            if too_soon:  # (or tried meanwhile, while this one waited for the lock)
                return False
            return await self._connect()

    async def _connect(self) -> bool:
        """Connect (cleaning any earlier connection up first) and list the tools."""
        before = self.listing
        self.tried_at = time.monotonic()
        try:
            await self.manager.reconnect(failed_only=False)
            if self.server not in self.manager.active_servers:
                raise self.manager.errors.get(self.server) or ConnectionError("not connected")
            self.listing = await asyncio.wait_for(self._full_listing(), CONNECT_SECONDS)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.retry_at = time.monotonic() + self.delay
            log.warning(
                "MCP server %s unavailable (%s); trying again in %.0fs",
                self.label,
                plain(exc),
                self.delay,
            )
            self.delay = min(self.delay * 2, BACKOFF_MOST)
            return False
        self.up = True
        self.delay = BACKOFF_FIRST
        self.ping_at = time.monotonic() + self.owner.check_interval
        log.info("MCP server %s connected: %d tools", self.label, len(self.listing))
        self.owner.came_back(self, before)
        return True

    async def _full_listing(self) -> list[dict[str, Any]]:
        """All the server lists (before a `tool_filter`: a dynamic one needs a run)."""
        invalidate = getattr(self.server, "invalidate_tools_cache", None)
        if callable(invalidate):
            invalidate()  # a cached list would be the old connection's
        try:
            tools = await self._list()
        except UserError:
            cached = self.server.cached_tools
            if not callable(getattr(self.server, "tool_filter", None)) or cached is None:
                raise
            return listing_of(cached)
        return listing_of(self.server.cached_tools or tools)

    def mark_down(self, why: BaseException | None = None) -> None:
        """Its connection is gone: reconnect it at once (then with backoff)."""
        if self.up:
            log.warning("MCP server %s dropped%s", self.label, f" ({plain(why)})" if why else "")
            self.retry_at = time.monotonic()
        self.up = False
        self.owner.wake()

    def unavailable(self) -> McpServerDown:
        """What a run that needs it gets while it is down."""
        seen = SEEN_DOWN.get()
        if seen is not None:
            seen.add(self.label)
        return McpServerDown([self.label])

    async def ping(self) -> bool:
        """Whether it answers right now. Any answer counts: servers of MCP 2 answer a ping
        with "Method not found". A server without a client session is trusted."""
        if not self.up:
            return False
        if not hasattr(self.server, "session"):
            return True
        session: Any = self.server.session
        if session is None:
            self.mark_down()
            return False
        try:
            await asyncio.wait_for(session.send_ping(), PING_SECONDS)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if answered(exc):  # e.g. "Method not found": it answered all the same
                return True
            if timed_out(exc) and self.in_flight:  # busy with a call: not proof it is gone
                return True
            self.mark_down(TimeoutError("no answer to a ping") if timed_out(exc) else exc)
            return False
        return True

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> Any:
        if not self.up and not await self.revive():
            raise self.unavailable()
        try:
            return await self._list(run_context, agent)
        except Exception as exc:
            if not connection_lost(exc):
                raise
            self.mark_down(exc)
            raise self.unavailable() from exc

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> Any:
        watch = CURRENT_CALL.get()
        if not self.up and not await self.revive():
            if watch is not None:
                watch.not_sent = True
            raise self.unavailable()
        self.in_flight += 1
        try:
            if meta is None:
                return await self._call(tool_name, arguments)
            return await self._call(tool_name, arguments, meta)
        except Exception as exc:
            if connection_lost(exc):
                self.mark_down(exc)
                if watch is not None:
                    watch.no_answer = NoAnswer.CONNECTION_LOST
            elif timed_out(exc) and watch is not None:  # slow, not gone: it stays up
                watch.no_answer = NoAnswer.TIMED_OUT
            raise
        finally:
            self.in_flight -= 1


async def watched_call(
    server: object, run: Callable[[], Awaitable[Any]], *, safe: bool
) -> tuple[Any, NoAnswer | None]:
    """Run one tool call (`run`), watching it (`tool_failures.CURRENT_CALL`), and its MCP
    server if it has one. Raises `McpServerDown` when nothing was sent (a side effect is
    first checked with a ping, so that it is not sent into a connection that is already
    gone), and, for a retry-safe call, when the connection failed during it (running it
    again is harmless). Returns the output, and why a side-effecting call got no answer,
    if it did not (a timeout, a lost connection: its outcome is unknown)."""
    managed = managed_of(server)
    if managed is not None and not safe and not (await managed.revive() and await managed.ping()):
        raise managed.unavailable()
    watch = CallWatch()
    token = CURRENT_CALL.set(watch)
    try:
        output = await run()
    finally:
        CURRENT_CALL.reset(token)
    lost = watch.no_answer is NoAnswer.CONNECTION_LOST
    if managed is not None and (watch.not_sent or (safe and lost)):
        raise managed.unavailable()
    return output, None if safe else watch.no_answer


class McpServers:
    """The MCP servers of an agent graph, owned by one runtime. Empty (and free) for an
    agent without any."""

    def __init__(self, agents: Iterable[Agent[Any]], *, check_interval: float) -> None:
        members = list(agents)
        found: list[MCPServer] = []
        for agent in members:
            found += [s for s in agent.mcp_servers if all(s is not o for o in found)]
        self.check_interval = check_interval
        self._wake = asyncio.Event()
        self._listed = asyncio.Event()  # every server listed its tools once
        self.servers = [ManagedServer(server, self) for server in found]
        self._by_agent = {
            agent.name: [m for m in self.servers if any(m.server is s for s in agent.mcp_servers)]
            for agent in members
        }
        self.on_change: Callable[[], None] = lambda: None  # the listings changed
        self.on_back: Callable[[list[ConversationKey]], None] = lambda keys: None
        self._waiting: dict[ConversationKey, set[str]] = {}
        self._starting: asyncio.Future[None] | None = None
        self._watching: asyncio.Task[None] | None = None
        self.closed = False

    def __bool__(self) -> bool:
        return bool(self.servers)

    @property
    def listings(self) -> dict[str, list[dict[str, Any]]]:
        return {m.name: m.listing for m in self.servers if m.listing is not None}

    def down(self) -> list[str]:
        return [m.label for m in self.servers if not m.up]

    def all_listed(self) -> bool:
        """Every server listed its tools once: the agent fingerprint is final."""
        return all(m.listing is not None for m in self.servers)

    async def until_listed(self) -> None:
        """Until every server has listed its tools once (`all_listed`)."""
        if not self.all_listed():
            await self._listed.wait()

    def wake(self) -> None:
        self._wake.set()

    async def start(self) -> None:
        """Connect every server once (in parallel) and list its tools; then watch them.
        Called before the process reports healthy; a runtime that was not started starts
        on first use (`ready`)."""
        if not self.servers or self.closed:
            return
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        started = time.perf_counter()
        await asyncio.gather(*(m.revive(due=True) for m in self.servers))
        log.info(
            "MCP servers: %d of %d connected in %.2fs",
            sum(m.up for m in self.servers),
            len(self.servers),
            time.perf_counter() - started,
        )
        self.on_change()
        self._watching = asyncio.create_task(self._watch())

    async def ready(self) -> list[str]:
        """Started; returns the servers whose tools were never listed (tried once more
        now, at most once a second): the fingerprint is not final without them, so nothing
        may be verified or committed."""
        await self.start()
        unlisted = [m for m in self.servers if m.listing is None]
        for managed in unlisted:
            await managed.revive()
        return [m.label for m in unlisted if m.listing is None]

    async def check_for(self, agent_name: str | None) -> None:
        """Raises `McpServerDown` unless each server of the agent named (of every agent,
        when it is not known) answers a ping now; one that is down is tried once more
        first (at most once a second)."""
        servers = self._by_agent.get(agent_name or "", self.servers)
        down = []
        for managed in servers:
            if not (await managed.revive() and await managed.ping()):
                down.append(managed.label)
        if down:
            raise McpServerDown(down)

    def wait_for(self, key: ConversationKey, servers: Iterable[str]) -> None:
        """A thread paused for these servers: continue it when they are all back."""
        self._waiting[key] = set(servers)
        self._continue_waiting()  # (they may be back already)

    def came_back(self, managed: ManagedServer, before: list[dict[str, Any]] | None) -> None:
        """A server connected (again) and listed its tools."""
        if managed.listing != before:
            if before is not None:
                log.warning(
                    "MCP server %s lists other tools now: paused runs that used them are set "
                    "aside when they resume (the fingerprint changed)",
                    managed.label,
                )
            self.on_change()
        if self.all_listed():  # (after `on_change`: the fingerprint is the final one)
            self._listed.set()
        self._continue_waiting()

    async def close(self) -> None:
        """Stop watching; clean every server up (a stdio server's process ends)."""
        self.closed = True
        started = time.perf_counter()
        for task in (self._watching, self._starting):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await asyncio.gather(
            *(m.manager.cleanup_all() for m in self.servers), return_exceptions=True
        )
        for m in self.servers:
            m.up = False
        if self.servers:
            log.info("MCP servers cleaned up in %.2fs", time.perf_counter() - started)

    async def _watch(self) -> None:
        """Ping each server every `check_interval`; reconnect one that is down when its
        backoff is due (or at once, when it was just found down)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._next_check())
            self._wake.clear()
            await asyncio.gather(*(self._check(m) for m in self.servers))

    def _next_check(self) -> float:
        due = [m.ping_at if m.up else m.retry_at for m in self.servers]
        return max(0.05, min(due) - time.monotonic())

    async def _check(self, managed: ManagedServer) -> None:
        now = time.monotonic()
        if managed.up and now >= managed.ping_at:
            managed.ping_at = now + self.check_interval
            await managed.ping()
        if not managed.up and time.monotonic() >= managed.retry_at:
            await managed.revive(due=True)

    def _continue_waiting(self) -> None:
        down = set(self.down())
        ready = [key for key, servers in self._waiting.items() if not servers & down]
        for key in ready:
            del self._waiting[key]
        if ready:
            self.on_back(ready)


class _HasServers(Protocol):
    @property
    def mcp(self) -> McpServers: ...


class PausedServe(Protocol):
    """What `paused_for` uses of a serve (so this module needs nothing of `serving`)."""

    @property
    def key(self) -> ConversationKey: ...
    @property
    def parts(self) -> _HasServers: ...
    async def emit_now(self, outcome: Outcome) -> None: ...


async def paused_for(serving: PausedServe, servers: Sequence[str]) -> Paused:
    """A run needs MCP servers that are down: the thread waits, interrupted, and is told
    (the serve applies the `Paused` returned). Nothing is lost: its messages stay queued,
    its checkpoint stays as it was. This process continues it when the servers are back;
    the next message or `/resume` does too."""
    names = " and ".join(f"`{name}`" for name in servers)
    log.warning("%s: paused: MCP server(s) %s unavailable", serving.key, ", ".join(servers))
    serving.parts.mcp.wait_for(serving.key, servers)
    await serving.emit_now(
        Notice(
            key=serving.key,
            kind=NoticeKind.TOOLS_UNAVAILABLE,
            text=f"The {names} tools are unavailable right now, so I paused here. Nothing was "
            "lost: I'll continue when they are back (or use /resume).",
        )
    )
    return Paused()
