"""A help desk whose tools come from an MCP server: `BOT_AGENT=examples.mcp_helpdesk:build_agent`
(docs/agents.md, "An MCP server").

The bot starts the server (`examples.helpdesk_server`, over stdio) before it reports
healthy, lists its tools, guards each call like a function tool's, and restarts the server
when it drops. What each tool is to the bot is said here, beside the server:

- `find_tickets` is `retry_safe`: read-only, no pause, may run again after a crash;
- `open_ticket` is `idempotent`, its key in the `idempotency_key` argument: after a crash
  mid-call the bot sends it again with the same key, and the service opens one ticket;
- `close_ticket` needs a person's approval (the server's `require_approval`), and like every
  other side effect runs at most once.

`client_session_timeout_seconds` is how long the bot waits for a tool's answer: keep it
above the slowest tool's longest run. A call that times out may still have acted, so it is
of unknown outcome and is not sent again (unless the tool is keyed, as `open_ticket` is).

Offline (no OPENAI_API_KEY, or BOT_MODEL=offline) the agent runs on the bot's offline model,
which calls a tool the message names: try `@agent find_tickets printer`, `@agent open_ticket
title="printer jammed on floor 3"` (then **Restart bot** within 3 s) and `@agent
close_ticket ticket_id=1 reason=fixed` (Approve). Tickets go to BOT_DATA_DIR/helpdesk.jsonl."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from agents import Agent
from agents.mcp import MCPServerStdio

from bot.agent_api import OfflineModel, idempotent, retry_safe, runs_offline

CHECKOUT = Path(__file__).resolve().parents[1]  # where `python -m examples...` finds it
TOOL_TIMEOUT = 30.0  # seconds: above open_ticket's longest run (HELPDESK_SECONDS, 3)

INSTRUCTIONS = (
    "You are the help desk in a Slack thread. Find tickets with find_tickets, open one with "
    "open_ticket and close one with close_ticket when asked. Be brief."
)


def helpdesk_server() -> MCPServerStdio:
    data = Path(os.environ.get("BOT_DATA_DIR", ".bot-data")).resolve()
    server = MCPServerStdio(
        {
            "command": sys.executable,
            "args": ["-m", "examples.helpdesk_server"],
            "cwd": str(CHECKOUT),
            # The MCP client passes the server a bare environment: name what it needs.
            "env": {
                "BOT_DATA_DIR": str(data),
                "HELPDESK_SECONDS": os.environ.get("HELPDESK_SECONDS", "3"),
            },
        },
        name="helpdesk",
        require_approval={"always": {"tool_names": ["close_ticket"]}},
        client_session_timeout_seconds=TOOL_TIMEOUT,
    )
    retry_safe(server, "find_tickets")
    idempotent(server, "open_ticket", key_argument="idempotency_key")
    return server


def build_agent() -> Agent[Any]:
    return Agent(
        name="helpdesk",
        instructions=INSTRUCTIONS,
        mcp_servers=[helpdesk_server()],
        model=OfflineModel() if runs_offline() else None,
    )
