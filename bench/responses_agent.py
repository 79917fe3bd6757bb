"""The agent both bots of the CPU benchmark run: the real `OpenAIResponsesModel` against the
scripted `/v1/responses` server at `BENCH_RESPONSES_URL` (`testkit.responses`), and one
read-only tool. `respond` is that server's script: a message naming `lookup` gets a call to
the tool, the tool's output gets `done: …`, anything else `echo: …`."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agents import Agent, OpenAIResponsesModel, function_tool
from openai import AsyncOpenAI

from testkit.responses import (
    RespondingResponses,
    items_of,
    message,
    responses_server,
    tool_call,
    user_text,
)


def respond(request: dict[str, Any]) -> list[dict[str, Any]]:
    items = items_of(request)
    last = items[-1] if items else {}
    if last.get("type") == "function_call_output":
        return [message(f"done: {str(last.get('output'))[:40]}")]
    text = user_text(request)
    if "lookup" in text.lower():
        return [tool_call("lookup", {"topic": text[-30:]}, call_id=f"call_{uuid.uuid4().hex[:12]}")]
    return [message(f"echo: {text}")]


@contextmanager
def model_server() -> Iterator[str]:
    """The scripted `/v1/responses` server answering by `respond`; its base URL."""
    with responses_server(RespondingResponses(respond)) as url:
        yield url


@function_tool
def lookup(topic: str) -> str:
    """Look a topic up (read-only)."""
    return f"facts about {topic}: " + "lorem ipsum dolor sit amet " * 4


def build_agent(base_url: str | None = None) -> Agent[Any]:
    """Against `base_url`, or the server at `BENCH_RESPONSES_URL`."""
    client = AsyncOpenAI(
        base_url=base_url or os.environ["BENCH_RESPONSES_URL"], api_key="sk-bench", max_retries=0
    )
    return Agent(
        name="assistant",
        instructions="Answer briefly; use the tools when asked.",
        model=OpenAIResponsesModel(model="gpt-scripted", openai_client=client),
        tools=[lookup],
    )


def build_durable_agent() -> Agent[Any]:
    """The same agent for our bot, its tool declared harmless to run again (no pre-call
    pause: a read-only tool, as the plain bot's)."""
    from bot.runtime import retry_safe

    agent = build_agent()
    for tool in agent.tools:
        retry_safe(tool)
    return agent
