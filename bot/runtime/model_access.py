"""Which model the agents' runs reach, and what is said when it cannot be reached for want of
a key.

`BOT_MODEL=offline` puts every agent without a `Model` of its own on the scripted offline
model (`bot.offline_model`: no key, no network). Otherwise such an agent runs on OpenAI's
Responses API, which needs `OPENAI_API_KEY`: `needs_openai_key` names the agents that would
run without one, so that a start says so (local mode on its page and in the terminal; the
served bot in its log and `/healthz`) instead of each run failing later, and
`model_access_reason` is the plain reason a run that did fail for its key gives in the
thread (`driver.plain_reason` asks it first)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import openai
from agents import Agent
from agents.models.interface import Model

from bot.model_choice import KEY, OFFLINE
from bot.runtime.agent_graph import agents_of
from bot.settings import RuntimeSettings


def offline(settings: RuntimeSettings) -> bool:
    return settings.model == OFFLINE


def needs_openai_key(
    agent: Agent[Any], settings: RuntimeSettings, environ: Mapping[str, str] = os.environ
) -> list[str]:
    """The names of the agents reachable from `agent` whose runs would call OpenAI's model
    while no key is set (none when one is, or when the bot runs offline). `BOT_MODEL`, when
    set, is every agent's model; otherwise an agent with a `Model` of its own keeps it."""
    if environ.get(KEY) or offline(settings):
        return []
    reached = agents_of(agent)
    if settings.model:
        return [found.name for found in reached]
    return [found.name for found in reached if not isinstance(found.model, Model)]


def model_access_reason(exc: BaseException) -> str | None:
    """The plain reason for a run that stopped because the model service cannot be used
    with the key it has (none, or one it refuses); None for any other failure."""
    if isinstance(exc, openai.AuthenticationError):
        return f"the model service refused the bot's key ({KEY})"
    if isinstance(exc, openai.OpenAIError) and not isinstance(exc, openai.APIError):
        said = str(exc).lower()
        if "credentials" in said or "api_key" in said:
            return f"the model service needs a key, and none is set ({KEY})"
    return None
