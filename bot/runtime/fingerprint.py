"""An agent fingerprint: what a checkpoint must match to be resumed safely. The SDK does not
notice a changed tool signature, so we hash names, tool schemas and instructions ourselves."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agents import Agent, FunctionTool, Handoff


def describe_agent(agent: Agent[Any], seen: set[str] | None = None) -> list[dict[str, Any]]:
    seen = seen if seen is not None else set()
    if agent.name in seen:
        return []
    seen.add(agent.name)
    tools = []
    for tool in agent.tools:
        entry: dict[str, Any] = {"name": tool.name, "kind": type(tool).__name__}
        if isinstance(tool, FunctionTool):
            entry["schema"] = tool.params_json_schema
            entry["strict"] = tool.strict_json_schema
        tools.append(entry)
    instructions = agent.instructions if isinstance(agent.instructions, str) else "<dynamic>"
    described = [
        {
            "name": agent.name,
            "instructions": instructions,
            "version": getattr(agent, "version", None),
            "tools": sorted(tools, key=lambda tool: tool["name"]),
            "handoffs": sorted(_handoff_name(h) for h in agent.handoffs),
            "output_type": repr(agent.output_type),
        }
    ]
    for handoff in agent.handoffs:
        if isinstance(handoff, Agent):
            described.extend(describe_agent(handoff, seen))
    return described


def agent_fingerprint(agent: Agent[Any], version: str = "") -> str:
    document = {"agents": describe_agent(agent), "version": version}
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _handoff_name(handoff: Agent[Any] | Handoff[Any, Any]) -> str:
    return handoff.name if isinstance(handoff, Agent) else handoff.agent_name
