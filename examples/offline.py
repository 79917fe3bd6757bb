"""The examples' offline model: `bot.agent_api.OfflineModel` (deterministic, streamed a word
at a time, no key, no network) with an example's own responder, which understands a few
sentences of that example. It plays when the bot runs offline (`runs_offline()`:
`BOT_MODEL=offline`, or local mode without OPENAI_API_KEY); otherwise the agent gets no
model of its own and runs on the bot's (OpenAI's, `BOT_MODEL`)."""

from __future__ import annotations

from agents.models.interface import Model

from bot.agent_api import OfflineModel, runs_offline
from bot.demo_model import Responder


def offline_model(responder: Responder) -> Model | None:
    """An `OfflineModel` answering with `responder` when the bot runs offline, else None."""
    if not runs_offline():
        return None
    return OfflineModel(responder=responder)
