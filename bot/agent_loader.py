"""Load the agent named by `BOT_AGENT=module:function`."""

from __future__ import annotations

import importlib
from typing import Any

from agents import Agent


class AgentLoadError(Exception):
    pass


def load_agent(spec: str) -> Agent[Any]:
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise AgentLoadError(f"BOT_AGENT must look like module:function, not {spec!r}")
    try:
        factory = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise AgentLoadError(f"BOT_AGENT={spec}: {exc}") from exc
    agent = factory()
    if not isinstance(agent, Agent):
        raise AgentLoadError(f"BOT_AGENT={spec} returned {type(agent).__name__}, not an Agent")
    return agent
