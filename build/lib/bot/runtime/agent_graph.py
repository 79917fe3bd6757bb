"""The agents an operator's agent reaches, as the Agents SDK itself reaches them: through
`handoffs` (agents, and `handoff()` objects by their target) and through agents used as
tools (`Agent.as_tool`). The SDK restores a saved run by this same graph (its agent map), so
what the bot guards and fingerprints is exactly what can run."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from agents import Agent, FunctionTool, Handoff


def agents_of(root: Agent[Any]) -> list[Agent[Any]]:
    """Every agent reachable from `root`, breadth first, each once (by identity)."""
    found: list[Agent[Any]] = []
    seen: set[int] = set()
    queue: deque[Agent[Any]] = deque([root])
    while queue:
        agent = queue.popleft()
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        found.append(agent)
        queue.extend(handoff_targets(agent))
        queue.extend(nested_agent for _, nested_agent in agent_tools(agent))
    return found


def handoff_targets(agent: Agent[Any]) -> Iterator[Agent[Any]]:
    for handoff in agent.handoffs:
        target = handoff_target(handoff)
        if target is not None:
            yield target


def handoff_target(handoff: Agent[Any] | Handoff[Any, Any]) -> Agent[Any] | None:
    """The agent a handoff leads to (a `handoff()` object keeps a reference to it)."""
    if isinstance(handoff, Agent):
        return handoff
    reference = getattr(handoff, "_agent_ref", None)
    target = reference() if callable(reference) else getattr(handoff, "agent", None)
    return target if isinstance(target, Agent) else None


def agent_tools(agent: Agent[Any]) -> Iterator[tuple[FunctionTool, Agent[Any]]]:
    """Tools that run another agent (`Agent.as_tool`), with that agent."""
    for tool in agent.tools:
        nested = getattr(tool, "_agent_instance", None)
        if isinstance(tool, FunctionTool) and is_agent_tool(tool) and isinstance(nested, Agent):
            yield tool, nested


def is_agent_tool(tool: object) -> bool:
    return bool(getattr(tool, "_is_agent_tool", False))
