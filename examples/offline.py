"""The examples' offline model: `bot.demo_model.DemoModel` (deterministic, streamed a word at
a time, no key, no network) with an example's own responder. Local mode sets BOT_DEMO_MODEL=1
when OPENAI_API_KEY is not set; otherwise the agent gets no model of its own and runs on
the bot's (OpenAI's, `BOT_MODEL`)."""

from __future__ import annotations

import os

from agents.models.interface import Model

from bot.demo_model import DemoModel, Responder


def offline_model(responder: Responder) -> Model | None:
    """A `DemoModel` answering with `responder` when BOT_DEMO_MODEL=1, else None."""
    if os.getenv("BOT_DEMO_MODEL") != "1":
        return None
    return DemoModel(responder=responder)
