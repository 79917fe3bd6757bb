"""The floor under ours' CPU per plain answer (issue 28): what a durable, streamed answer
cannot do without, beyond what the plain bot does, each measured alone in this process.

Ours does what the plain bot (`bench.plain_bot`) does, and:

- streams the model's answer: the SDK's streamed run, where the plain bot calls
  `Runner.run` (the same agent and scripted `/v1/responses` server, no session);
- makes three Slack Web API calls (the agent session's status, the stream's start and stop)
  where the plain bot makes one `say()`; ours on one kept-alive client session, the plain
  bot's on a new one per call, as slack_sdk makes them without a session;
- makes three durable writes (the keep before the ack, the commit before the answer is
  posted, the release after it) where the plain bot makes two `SQLiteSession` operations
  (read the history, add the turn's items). A write is measured as one heartbeat through
  the store's own client and the bridge (`StorageCalls`: a worker thread on aws, the event
  loop's own thread locally, as ours makes it): smaller than the keep or the commit, so
  the floor is if anything too low.

The floor of a plain answer is the plain bot's CPU, measured by `bench.cpu` in the same run,
plus these differences; what ours spends above it is ours to remove. CPU is the event
loop's thread time where a server shares the process (the model's, the stand-in's), the
process time where only the measured work runs."""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from agents import Runner, SQLiteSession
from slack_sdk.web.async_client import AsyncWebClient

from bench.common import section, table
from bench.emulators import Emulators
from bench.responses_agent import build_agent
from bot.runtime import validating_by_tag
from bot.slackapp.app import web_client
from bot.slackapp.settings import SlackSettings
from bot.standin.slack_api import SlackWebApi
from storage import Store
from storage.calls import StorageCalls
from storage.local import LocalStore
from testkit.slack import TEAM, running_api

ROUNDS = 3
EACH = 60  # of each kind per round, interleaved
CHANNEL = "C0FLOOR01"
THREAD = "1700000000.000100"
Clock = Callable[[], float]


@dataclass(frozen=True)
class Kind:
    """One kind of work measured: `work(n)` for n = 0, 1, ..., timed by `clock`, each of its
    batches run `within` a context of its own."""

    work: Callable[[int], Awaitable[Any]]
    clock: Clock
    within: Callable[[], AbstractContextManager[None]] = nullcontext


async def per_call(kind: Kind, count: int) -> float:
    """CPU ms per call of `kind`'s work."""
    with kind.within():
        start = kind.clock()
        for n in range(count):
            await kind.work(n)
        return (kind.clock() - start) * 1000 / count


async def interleaved(kinds: dict[str, Kind]) -> dict[str, float]:
    """Each kind warmed, then measured in interleaved rounds: the median of its rounds."""
    for kind in kinds.values():
        with kind.within():
            for n in range(10):
                await kind.work(n)
    rounds: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(ROUNDS):
        for name, kind in kinds.items():
            rounds[name].append(await per_call(kind, EACH))
    return {name: statistics.median(values) for name, values in rounds.items()}


async def sdk_runs(model_url: str) -> dict[str, float]:
    """CPU ms per `Runner.run` as the plain bot runs it, and per streamed run (every event
    consumed) as ours does, on the same agent."""
    agent = build_agent(model_url)

    async def plain(n: int) -> None:
        await Runner.run(agent, f"hello there floor {n}")

    async def streamed(n: int) -> None:
        result = Runner.run_streamed(agent, f"hello there floor {n}")
        async for _ in result.stream_events():
            pass

    return await interleaved(
        {
            # The plain bot's client validates the way it comes; ours by each value's tag.
            "run": Kind(plain, time.thread_time, lambda: validating_by_tag(on=False)),
            "streamed": Kind(streamed, time.thread_time, validating_by_tag),
        }
    )


@contextmanager
def standin_thread() -> Iterator[str]:
    """The Slack stand-in on a loop of its own thread: its CPU is not the caller's thread's."""
    ready: list[tuple[str, asyncio.AbstractEventLoop, asyncio.Event]] = []
    started = threading.Event()

    async def serve() -> None:
        stop = asyncio.Event()
        async with running_api(SlackWebApi(team=TEAM)) as url:
            ready.append((url, asyncio.get_running_loop(), stop))
            started.set()
            await stop.wait()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    started.wait(10)
    url, loop, stop = ready[0]
    try:
        yield url
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(5)


@asynccontextmanager
async def clients(url: str) -> AsyncIterator[tuple[AsyncWebClient, AsyncWebClient]]:
    """Ours (the bot's own client, one kept-alive session) and the plain bot's (no session)."""
    token = "xoxb-floor"
    async with aiohttp.ClientSession() as session:
        ours = web_client(SlackSettings.model_construct(bot_token=token, api_url=url), session)
        yield ours, AsyncWebClient(token=token, base_url=url)


async def slack_calls() -> dict[str, float]:
    """CPU ms per `chat.postMessage`, made as ours makes it and as the plain bot does."""
    with standin_thread() as url:
        async with clients(f"{url}/api/") as (ours, plain):

            def poster(client: AsyncWebClient) -> Callable[[int], Awaitable[Any]]:
                async def post(n: int) -> None:
                    await client.chat_postMessage(channel=CHANNEL, thread_ts=THREAD, text=f"{n}")

                return post

            return await interleaved(
                {
                    "ours": Kind(poster(ours), time.thread_time),
                    "plain": Kind(poster(plain), time.thread_time),
                }
            )


async def durable_write(store: Store) -> float:
    """CPU ms per heartbeat through the store's client and the bridge (all threads)."""
    storage_calls = StorageCalls(store)
    name = f"floor-{uuid.uuid4().hex[:8]}"

    async def beat(_: int) -> None:
        await storage_calls(store.beat, name)

    try:
        return (await interleaved({"write": Kind(beat, time.process_time)}))["write"]
    finally:
        storage_calls.close()


async def plain_session(folder: Path) -> float:
    """CPU ms of what the plain bot's `SQLiteSession` does per answer: opened on its file,
    the history read, the turn's two items added (all threads)."""
    db = folder / "sessions.db"

    async def answer(n: int) -> None:
        session = SQLiteSession(f"T{n}", db)
        await session.get_items()
        await session.add_items(
            [
                {"role": "user", "content": f"hello there floor {n}"},
                {"role": "assistant", "content": f"echo: hello there floor {n}"},
            ]
        )

    return (await interleaved({"session": Kind(answer, time.process_time)}))["session"]


async def measure_floors(emulators: Emulators, model_url: str) -> dict[str, float]:
    """Each difference's parts, in CPU ms."""
    runs = await sdk_runs(model_url)
    calls = await slack_calls()
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalStore(Path(tmp) / "ours")
        local_write = await durable_write(local)
        local.close()
        session = await plain_session(Path(tmp))
    aws = emulators.store("cpu-floor")
    aws_write = await durable_write(aws)
    aws.close()
    return {
        "sdk_run_ms": runs["run"],
        "sdk_streamed_ms": runs["streamed"],
        "slack_call_ours_ms": calls["ours"],
        "slack_call_plain_ms": calls["plain"],
        "write_local_ms": local_write,
        "write_aws_ms": aws_write,
        "plain_session_ms": session,
    }


def added(parts: dict[str, float], backend: str) -> list[tuple[str, float]]:
    """What ours must add to a plain answer on `backend`: each difference, in ms."""
    write = parts[f"write_{backend}_ms"]
    return [
        (
            f"the SDK's streamed run ({parts['sdk_streamed_ms']:.2f}) less `Runner.run` "
            f"({parts['sdk_run_ms']:.2f})",
            parts["sdk_streamed_ms"] - parts["sdk_run_ms"],
        ),
        (
            f"3 Web API calls of ours ({parts['slack_call_ours_ms']:.2f} each) less the plain "
            f"bot's 1 ({parts['slack_call_plain_ms']:.2f})",
            3 * parts["slack_call_ours_ms"] - parts["slack_call_plain_ms"],
        ),
        (
            f"3 durable writes ({write:.2f} each) less the plain bot's `SQLiteSession` "
            f"({parts['plain_session_ms']:.2f})",
            3 * write - parts["plain_session_ms"],
        ),
    ]


def report_floors(
    parts: dict[str, float], plain_ms: float, ours_ms: dict[str, float], targets: dict[str, float]
) -> None:
    """The floor of a plain answer on each backend beside ours, as ratios to the plain bot."""
    section(
        "The floor under a plain answer: what a durable, streamed answer cannot do without",
        "Each difference between ours and the plain bot measured alone in the bench's own "
        "process, in this run (`bench.floors`): the SDK's streamed run against `Runner.run` "
        "on the same agent and scripted model; a `chat.postMessage` as ours makes it (one "
        "kept-alive session) and as the plain bot does (a session per call); a durable "
        "write (one heartbeat through the store's client and the bridge, on a storage thread "
        "on aws and on the loop's own locally: lighter than a keep or a commit); what the "
        "plain bot's `SQLiteSession` does per answer. The floor is the plain bot's CPU per "
        "answer above plus these; what ours spends above it is its own.",
    )
    rows: list[list[object]] = []
    for backend in ("local", "aws"):
        extra = added(parts, backend)
        for what, ms in extra:
            rows.append([backend, what, f"{ms:+.2f}"])
        floor = plain_ms + sum(ms for _, ms in extra)
        ours = ours_ms[backend]
        target = targets[backend]
        rows.append(
            [
                backend,
                f"the floor: the plain bot's {plain_ms:.2f} plus these "
                f"({floor / plain_ms:.2f}x; target ≤ {target:.2f}x)",
                f"{floor:.2f}",
            ]
        )
        rows.append(
            [
                backend,
                f"ours, measured ({ours / plain_ms:.2f}x): above the floor",
                f"{ours - floor:+.2f}",
            ]
        )
    print(table(["backend", "CPU ms per plain answer", "ms"], rows, "llr"), flush=True)
