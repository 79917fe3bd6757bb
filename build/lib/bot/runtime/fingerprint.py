"""An agent fingerprint: what a checkpoint must match to be resumed safely. The SDK does not
notice a changed tool signature, so we hash, for every agent the run can reach (handoffs,
`handoff()` objects, agents used as tools: `agent_graph`), its name, instructions, tools
(names, kinds, JSON schemas), handoffs, output type and version, plus the tools each MCP
server listed (names and input schemas) when the servers were connected.

Instructions given as a function cannot be compared: the function's name stands for them,
and the operator versions them with an attribute on the agent (`agent.version = "3"`) or on
the function (`instructions.version = "3"`); a change to a function's body that keeps its
name and version is not detected (docs/agents.md)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agents import Agent, CustomTool, FunctionTool, Handoff

from bot.runtime.agent_graph import agent_tools, handoff_target, handoff_targets, is_agent_tool

McpListings = Mapping[str, Sequence[dict[str, Any]]]  # server name -> its tools


def describe_agent(
    agent: Agent[Any], mcp: McpListings | None = None, seen: set[str] | None = None
) -> list[dict[str, Any]]:
    """Depth first, each agent name once: for a graph of plain agents and function tools
    this is the description (and so the fingerprint) earlier versions wrote, so that an
    upgrade does not set aside every paused conversation."""
    seen = seen if seen is not None else set()
    if agent.name in seen:
        return []
    seen.add(agent.name)
    described = [_describe_one(agent, mcp or {})]
    for target in handoff_targets(agent):
        described += describe_agent(target, mcp, seen)
    for _, nested in agent_tools(agent):
        described += describe_agent(nested, mcp, seen)
    return described


def _describe_one(agent: Agent[Any], mcp: McpListings) -> dict[str, Any]:
    described: dict[str, Any] = {
        "name": agent.name,
        "instructions": _instructions(agent),
        "version": getattr(agent, "version", None),
        "tools": sorted((_describe_tool(tool) for tool in agent.tools), key=lambda t: t["name"]),
        "handoffs": sorted(_describe_handoff(h) for h in agent.handoffs),
        "output_type": repr(agent.output_type),
    }
    if agent.mcp_servers:
        described["mcp"] = {
            server.name: sorted(
                (_describe_mcp_tool(tool) for tool in mcp.get(server.name, [])),
                key=lambda t: str(t["name"]),
            )
            for server in agent.mcp_servers
        }
    return described


def _instructions(agent: Agent[Any]) -> Any:
    instructions = agent.instructions
    if instructions is None or isinstance(instructions, str):
        return instructions
    name = getattr(instructions, "__qualname__", type(instructions).__qualname__)
    module = getattr(instructions, "__module__", "")
    return {"dynamic": f"{module}.{name}", "version": getattr(instructions, "version", None)}


def _describe_tool(tool: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": tool.name, "kind": type(tool).__name__}
    if isinstance(tool, FunctionTool):
        entry["schema"] = tool.params_json_schema
        entry["strict"] = tool.strict_json_schema
        if is_agent_tool(tool):
            entry["agent"] = getattr(getattr(tool, "_agent_instance", None), "name", None)
    elif isinstance(tool, CustomTool):
        entry["format"] = repr(tool.format)
    return entry


def _describe_handoff(handoff: Agent[Any] | Handoff[Any, Any]) -> str:
    target = handoff_target(handoff)
    if isinstance(handoff, Agent):
        return handoff.name
    target_name = target.name if target is not None else handoff.agent_name
    return f"{handoff.tool_name}->{target_name}"


def _describe_mcp_tool(tool: dict[str, Any]) -> dict[str, Any]:
    return {"name": tool.get("name"), "schema": tool.get("inputSchema")}


def agent_fingerprint(agent: Agent[Any], version: str = "", mcp: McpListings | None = None) -> str:
    document = {"agents": describe_agent(agent, mcp), "version": version}
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
