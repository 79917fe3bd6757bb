"""AWS requests and Slack Web API calls per answer, end to end through the Slack path.

A signed event goes into the real bolt app (HTTP mode, in process, `testkit.slack`) on the
aws backend (DynamoDB Local + moto S3); the answer is posted to the recording Web API
stand-in, and the thread released. Every request any botocore client of the process sends
in between is counted (`bench.meter`), with the capacity units DynamoDB reports. The
recovery sweep's index queries (every replica, every third of a lease, whatever the traffic)
are left out of the per-answer figures and reported on their own."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bench.agents import build_agent
from bench.common import section, table
from bench.emulators import Emulators
from bench.meter import METER, Tally
from bot.runtime import ConversationRuntime, HistoryCache
from bot.settings import RuntimeSettings
from bot.slackapp.blocks import APPROVE
from bot.standin import requests
from bot.standin.slack_api import Message
from storage.aws import AwsStore
from testkit.slack import CHANNEL, TEAM, Harness, runtime_of, slack_bot

SWEEP = "dynamodb.Query(index)"


@dataclass
class PathFigures:
    label: str
    tally: Tally
    web_api: dict[str, int]

    @property
    def web_calls(self) -> int:
        return sum(self.web_api.values())


class Served:
    """Counts the runtime's completed `serve` calls (it returns after the release)."""

    def __init__(self, runtime: ConversationRuntime) -> None:
        self.done = 0
        self.changed = asyncio.Event()
        original = runtime.serve

        async def serve(key: Any, **options: Any) -> Any:
            try:
                return await original(key, **options)
            finally:
                self.done += 1
                self.changed.set()

        runtime.serve = serve  # type: ignore[method-assign]

    async def wait(self, count: int, within: float = 30) -> None:
        async def until() -> None:
            while self.done < count:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(until(), within)


async def measured(
    bot: Harness, served: Served, label: str, action: Callable[[], Awaitable[int]]
) -> PathFigures:
    """Run `action` (which returns how many serves it causes) and count what it sent."""
    calls_before = len(bot.api.calls)
    before = METER.snapshot()
    target = served.done
    target += await action()
    await served.wait(target)
    tally = METER.snapshot().minus(before)
    web: dict[str, int] = {}
    for call in bot.api.calls[calls_before:]:
        web[call.method] = web.get(call.method, 0) + 1
    return PathFigures(label, tally, web)


async def mention(bot: Harness, text: str) -> Message:
    message = bot.api.add_user_message(CHANNEL, "UALICE", f"<@UBOT> {text}")
    event = requests.app_mention(
        user="UALICE", text=message.text, ts=message.ts, channel=CHANNEL, team=TEAM
    )
    assert await bot.send_event(event) == 200
    return message


async def reply(bot: Harness, thread_ts: str, text: str) -> None:
    await bot.reply("UALICE", text, thread_ts)


async def scenarios(
    bot: Harness, runtime: ConversationRuntime, served: Served
) -> list[PathFigures]:
    figures: list[PathFigures] = []
    thread: list[Message] = []

    async def first() -> int:
        thread.append(await mention(bot, "hello there"))
        return 1

    figures.append(await measured(bot, served, "plain reply, new thread", first))

    async def again() -> int:
        await reply(bot, thread[0].ts, "and again")
        return 1

    figures.append(await measured(bot, served, "plain reply, thread this replica served", again))

    async def cold() -> int:
        runtime.parts.history = HistoryCache()  # as on another replica, or after a restart
        await reply(bot, thread[0].ts, "once more")
        return 1

    figures.append(await measured(bot, served, "plain reply, thread new to this replica", cold))

    async def side_effect() -> int:
        await mention(bot, "email Ana the notes")
        return 1

    figures.append(
        await measured(bot, served, "reply with one side effect, new thread", side_effect)
    )

    asked: list[Message] = []

    async def ask() -> int:
        asked.append(await mention(bot, "transfer 5 to bob"))
        return 1

    request = await measured(bot, served, "approval requested", ask)

    async def approve() -> int:
        cards = [m for m in bot.api.bot_replies(CHANNEL, asked[0].ts) if m.blocks]
        assert cards, "no approval request was posted"
        assert await bot.click(cards[-1], APPROVE, "UALICE") == 200
        return 1

    decided = await measured(bot, served, "approved, side effect, answer", approve)
    both = Tally()
    both.add(request.tally)
    both.add(decided.tally)
    web = dict(request.web_api)
    for method, n in decided.web_api.items():
        web[method] = web.get(method, 0) + n
    figures += [request, decided, PathFigures("approval + side effect, in all", both, web)]
    return figures


async def run_path(emulators: Emulators) -> list[PathFigures]:
    store: AwsStore = emulators.store("path")
    async with slack_bot(store, runtime_of(store, build_agent(), RuntimeSettings())) as bot:
        runtime = bot.runtime
        served = Served(runtime)  # counts serves from here on (the sweep has not run yet)
        await asyncio.sleep(0.5)  # the start-up recovery sweep
        # One unmeasured answer: bolt's and the SDK's first-use work is not per answer.
        await measured(bot, served, "warm-up", lambda: _one(bot))
        figures = await scenarios(bot, runtime, served)
    store.close()
    return figures


async def _one(bot: Harness) -> int:
    await mention(bot, f"warm up {uuid.uuid4().hex[:4]}")
    return 1


def report(figures: list[PathFigures]) -> dict[str, Any]:
    section(
        "AWS requests per answer, end to end (signed Slack event → answer posted → released)",
        "Counted from botocore's `before-send` on every client of the process (retries "
        "included); capacity units as DynamoDB Local reports them (`ReturnConsumedCapacity="
        "INDEXES`; transactions count double, as on AWS). The recovery sweep's index "
        "queries are not per answer and are left out (see the capacity model).",
    )
    rows = []
    by_label = {f.label: f for f in figures}
    for f in figures:
        t = f.tally.without(SWEEP)
        rows.append(
            [
                f.label,
                t.dynamodb,
                t.s3,
                t.total,
                t.describe(),
                f"{t.read_units:.1f}",
                f"{t.write_units:.1f}",
                f"{t.index_write_units:.1f}",
            ]
        )
    plain = by_label["plain reply, new thread"].tally.without(SWEEP)
    effect = by_label["reply with one side effect, new thread"].tally.without(SWEEP)
    extra = effect.minus(plain)
    rows.append(
        [
            "added by one side effect (difference)",
            extra.dynamodb,
            extra.s3,
            extra.total,
            extra.describe(),
            f"{extra.read_units:.1f}",
            f"{extra.write_units:.1f}",
            f"{extra.index_write_units:.1f}",
        ]
    )
    print(
        table(
            ["path", "DynamoDB", "S3", "total", "requests", "RCU", "WCU", "index WCU"],
            rows,
            "lrrrlrrr",
        )
    )
    section("Slack Web API calls per answer (same runs)")
    web_rows = [
        [f.label, f.web_calls, ", ".join(f"{m}x{n}" for m, n in sorted(f.web_api.items()))]
        for f in figures
    ]
    print(table(["path", "Web API calls", "methods"], web_rows, "lrl"))
    return {
        f.label: {
            "dynamodb": f.tally.without(SWEEP).dynamodb,
            "s3": f.tally.without(SWEEP).s3,
            "requests": dict(f.tally.without(SWEEP).requests),
            "rcu": f.tally.read_units,
            "wcu": f.tally.write_units,
            "gsi_wcu": f.tally.index_write_units,
            "web_api": f.web_api,
        }
        for f in figures
    } | {"side effect adds": {"dynamodb": extra.dynamodb, "s3": extra.s3}}
