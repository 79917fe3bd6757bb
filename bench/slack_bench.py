"""Slack layer benchmark: ack latency of signed event deliveries into the real bolt app
(HTTP mode), N at once, and the time until every answer is posted.

    ./dev bench slack   (or: python -m bench.slack_bench [--events 50] [--rounds 3])
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from bench.storage_bench import percentile
from bot.runtime import ConversationRuntime
from bot.settings import RuntimeSettings
from bot.standin import requests
from storage.local import LocalStore
from testkit.runtime import SideEffects, build_agent, echo_model
from testkit.slack import CHANNEL, TEAM, Harness, slack_bot


async def burst(bot: Harness, events: int) -> tuple[list[float], float]:
    async def one(i: int) -> float:
        message = bot.api.add_user_message(CHANNEL, "UALICE", f"<@UBOT> load {i}")
        event = requests.app_mention(
            user="UALICE", text=message.text, ts=message.ts, channel=CHANNEL, team=TEAM
        )
        started = time.perf_counter()
        status = await bot.send_event(event)
        assert status == 200
        return (time.perf_counter() - started) * 1000

    before = len(bot.api.called("chat.postMessage"))
    started = time.perf_counter()
    acks = await asyncio.gather(*(one(i) for i in range(events)))
    await bot.api.wait_for(
        lambda: len(bot.api.called("chat.postMessage")) >= before + events, within=300
    )
    return list(acks), time.perf_counter() - started


async def main(args: argparse.Namespace) -> None:
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore(Path(tmp))
        model = echo_model(args.events * args.rounds + 10)
        runtime = ConversationRuntime(
            store, build_agent(model, SideEffects(Path(os.devnull))), RuntimeSettings()
        )
        async with slack_bot(store, runtime) as bot:
            print(f"## Slack: {args.events} concurrent events, HTTP mode, local storage\n")
            print("| round | ack p50 ms | ack p99 ms | ack max ms | all answered, s |")
            print("|---:|---:|---:|---:|---:|")
            for round_ in range(1, args.rounds + 1):
                acks, total = await burst(bot, args.events)
                print(
                    f"| {round_} | {percentile(acks, 50):.1f} | {percentile(acks, 99):.1f} "
                    f"| {max(acks):.1f} | {total:.2f} |"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
