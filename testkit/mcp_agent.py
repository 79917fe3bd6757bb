"""Agents whose tools come from the test MCP server (`testkit.mcp_server`): `pay` needs a
person's approval (the server's `require_approval`), `balance` is retry-safe. For process
tests: `BOT_AGENT=testkit.mcp_agent:build_agent` (a stdio server, configured by the bot's
own environment: `MCP_*`; `MCP_TIMEOUT` is the client's read timeout, 30 s by default)."""

from __future__ import annotations

import os
import sys
from typing import Any

from agents import Agent
from agents.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHttp

from bot.runtime import retry_safe

APPROVE_PAY: Any = {"always": {"tool_names": ["pay"]}}


def payments_stdio(client_timeout: float = 30, /, **env: str) -> MCPServerStdio:
    """The test server over stdio; `client_timeout` is the MCP client's read timeout."""
    return MCPServerStdio(
        {
            "command": sys.executable,
            "args": ["-m", "testkit.mcp_server"],
            "env": {**os.environ, **env},
        },
        name="payments",
        require_approval=APPROVE_PAY,
        client_session_timeout_seconds=client_timeout,
    )


def payments_http(url: str) -> MCPServerStreamableHttp:
    return MCPServerStreamableHttp(
        {"url": url, "timeout": 5},
        name="payments",
        require_approval=APPROVE_PAY,
        client_session_timeout_seconds=30,
    )


def payments_agent(server: MCPServer, model: Any = None) -> Agent[Any]:
    return Agent(
        name="assistant",
        instructions="Pay people when asked.",
        model=model,
        mcp_servers=[retry_safe(server, "balance")],
    )


def build_agent() -> Agent[Any]:
    return payments_agent(payments_stdio(float(os.environ.get("MCP_TIMEOUT", 30))))
