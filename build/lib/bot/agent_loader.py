"""Load the agent named by `BOT_AGENT=module:function`."""

from __future__ import annotations

import importlib
from typing import Any

from agents import Agent


class AgentLoadError(Exception):
    pass


def import_factory(spec: str, variable: str, error: type[Exception]) -> Any:
    """The function `spec` names (`module:function`, from `variable`); `error` says why not."""
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise error(f"{variable} must look like module:function, not {spec!r}")
    try:
        return getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise error(f"{variable}={spec}: {exc}") from exc


def load_agent(spec: str) -> Agent[Any]:
    factory = import_factory(spec, "BOT_AGENT", AgentLoadError)
    agent = factory()
    if not isinstance(agent, Agent):
        raise AgentLoadError(f"BOT_AGENT={spec} returned {type(agent).__name__}, not an Agent")
    return agent
