"""What the agent experience costs and how soon it shows (issue 13's targets).

The real bolt app in process (HTTP mode, `testkit.slack`) on the aws backend, the real
`OpenAIResponsesModel` against the scripted `/v1/responses` server, which streams each answer
word by word (`testkit.responses`). Per answer, in one run:
- status after ack: from the moment Slack's request for the message is answered (200) to
  the `agents.sessions.setStatus` call (`processing`) the stand-in receives (or a status
  line's `assistant.threads.setStatus`, where sessions are refused);
- first text after first token: from the model server writing its first text delta to the
  stand-in receiving the stream's first text (`chat.startStream`);
- AWS requests per answer for a short and a long answer (a stream has no write per token);
- Web API calls per answer, by method."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, OpenAIResponsesModel
from openai import AsyncOpenAI

from bench.common import ms, percentile, section, table
from bench.emulators import Emulators
from bench.meter import METER, WRITES
from bench.slack_path import SWEEP, Served
from bot.settings import RuntimeSettings
from bot.standin import requests
from bot.standin.records import Call
from testkit.responses import ScriptedResponses, message, responses_server
from testkit.slack import CHANNEL, TEAM, Harness, runtime_of, slack_bot

SHORT_WORDS = 8
LONG_WORDS = 400
DELTA_DELAY = 0.005  # seconds between the model's words
# How a run shows it works: its agent session (or, where Slack refuses them, a status line).
STATUS_METHODS = ("agents.sessions.setStatus", "assistant.threads.setStatus")


@dataclass
class Seen:
    """When the stand-in received what, per thread (monotonic seconds)."""

    status: dict[str, float] = field(default_factory=dict)
    first_text: dict[str, float] = field(default_factory=dict)

    def __call__(self, call: Call) -> None:
        now = time.monotonic()
        if call.method in STATUS_METHODS:
            self.status.setdefault(str(call.args.get("thread_ts")), now)
        elif call.method == "chat.startStream" and "markdown_text" in str(call.args):
            self.first_text.setdefault(str(call.args.get("thread_ts")), now)


@dataclass
class Answered:
    words: int
    ack_to_status: float
    token_to_text: float
    aws_requests: int
    dynamodb_writes: int
    aws_kinds: str
    web_api: dict[str, int]


def words(n: int) -> str:
    return " ".join(f"word{i}" for i in range(n)) + "."


async def one_answer(
    bot: Harness, served: Served, script: ScriptedResponses, seen: Seen, n_words: int, request: int
) -> Answered:
    calls_before = len(bot.api.calls)
    target = served.done + 1
    before = METER.snapshot()
    question = bot.api.add_user_message(CHANNEL, "UALICE", f"<@UBOT> say {n_words} words")
    event = requests.app_mention(
        user="UALICE", text=question.text, ts=question.ts, channel=CHANNEL, team=TEAM
    )
    assert await bot.send_event(event) == 200
    acked = time.monotonic()
    await served.wait(target, within=60)  # answered and released (no polling reads)
    tally = METER.snapshot().minus(before).without(SWEEP)
    web: dict[str, int] = {}
    for call in bot.api.calls[calls_before:]:
        web[call.method] = web.get(call.method, 0) + 1
    writes = sum(
        n
        for name, n in tally.requests.items()
        if name.startswith("dynamodb.") and name.split(".", 1)[1] in WRITES
    )
    return Answered(
        words=n_words,
        ack_to_status=seen.status[question.ts] - acked,
        token_to_text=seen.first_text[question.ts] - script.first_delta_at[request],
        aws_requests=tally.total,
        aws_kinds=tally.describe(),
        dynamodb_writes=writes,
        web_api=web,
    )


async def run_live(emulators: Emulators, answers: int = 20) -> list[Answered]:
    sizes = [SHORT_WORDS if i % 2 == 0 else LONG_WORDS for i in range(answers + 1)]
    script = ScriptedResponses([[message(words(n))] for n in sizes], delta_delay=DELTA_DELAY)
    store = emulators.store("live")
    seen = Seen()
    results: list[Answered] = []
    with responses_server(script) as model_url:
        client = AsyncOpenAI(base_url=model_url, api_key="sk-bench", max_retries=0)
        agent: Agent[Any] = Agent(
            name="assistant",
            instructions="Answer.",
            model=OpenAIResponsesModel(model="gpt-scripted", openai_client=client),
        )
        async with slack_bot(store, runtime_of(store, agent, RuntimeSettings())) as bot:
            served = Served(bot.runtime)
            bot.api.listeners.append(seen)
            await asyncio.sleep(0.5)  # the start-up recovery sweep
            await one_answer(bot, served, script, seen, sizes[0], 0)  # warm-up, not counted
            for request in range(1, answers + 1):
                results.append(await one_answer(bot, served, script, seen, sizes[request], request))
    store.close()
    return results


def report(results: list[Answered]) -> dict[str, Any]:
    section(
        "The agent experience: how soon it shows, what it costs",
        f"{len(results)} answers, one after another, each in a new thread (aws backend, "
        "in-process bolt app, real OpenAI model class against the scripted server streaming "
        f"a word every {DELTA_DELAY * 1000:.0f} ms). Targets: status within 300 ms of the "
        "ack; first streamed text within 200 ms of the model's first token; no storage "
        "write per token. A long answer's extra requests come with the seconds it runs, not "
        "its length: a lease renewal every 2 s (which also carries a Stop to the run), a "
        "look for a stop asked from another replica every 0.5 s (GetItem), and the "
        "replica's heartbeat (a PutItem and a Query a second, shared by all its runs); the "
        "recovery sweep's index queries are left out.",
    )
    status = [r.ack_to_status for r in results]
    text = [r.token_to_text for r in results]
    print(
        table(
            ["from → to", "p50 ms", "p99 ms", "max ms"],
            [
                [
                    "ack → status set",
                    ms(percentile(status, 50)),
                    ms(percentile(status, 99)),
                    ms(max(status)),
                ],
                [
                    "model's first token → first streamed text",
                    ms(percentile(text, 50)),
                    ms(percentile(text, 99)),
                    ms(max(text)),
                ],
            ],
        ),
        flush=True,
    )
    rows = []
    figures: dict[str, Any] = {
        "ack_to_status_ms": [percentile(status, 50) * 1000, percentile(status, 99) * 1000],
        "token_to_text_ms": [percentile(text, 50) * 1000, percentile(text, 99) * 1000],
    }
    for size in (SHORT_WORDS, LONG_WORDS):
        group = [r for r in results if r.words == size]
        if not group:
            continue
        web: dict[str, float] = {}
        for r in group:
            for method, n in r.web_api.items():
                web[method] = web.get(method, 0) + n / len(group)
        aws = sum(r.aws_requests for r in group) / len(group)
        writes = sum(r.dynamodb_writes for r in group) / len(group)
        calls = sum(web.values())
        rows.append(
            [
                f"{size} words",
                f"{aws:.1f}",
                f"{writes:.1f}",
                f"{calls:.1f}",
                ", ".join(f"{m} {n:.1f}" for m, n in sorted(web.items())),
            ]
        )
        figures[f"{size}_words"] = {"aws": aws, "writes": writes, "web_api": web}
    print(
        "\n"
        + table(["answer", "AWS requests", "DynamoDB writes", "Web API calls", "by method"], rows),
        flush=True,
    )
    return figures
