"""The help desk's MCP server, run by the bot over stdio (`python -m examples.helpdesk_server`;
`examples.mcp_helpdesk` declares it). A ticket system in a file, BOT_DATA_DIR/helpdesk.jsonl,
that outlives the bot and this process, as a real service would:

- `find_tickets(query)`: read-only;
- `open_ticket(title, idempotency_key)`: a side effect the service applies once per key (a
  key seen before gets the first ticket back), answering HELPDESK_SECONDS (3) after it
  wrote the ticket, so that **Restart bot** in that window shows the keyed restart;
- `close_ticket(ticket_id, reason)`: a side effect (the agent's server asks a person first).

Written with the `mcp` package's `MCPServer` (called `FastMCP` before mcp 2)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

server = MCPServer("helpdesk")


def book() -> Path:
    return Path(os.environ.get("BOT_DATA_DIR", ".bot-data")) / "helpdesk.jsonl"


def tickets() -> list[dict[str, Any]]:
    path = book()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def write(entry: dict[str, Any]) -> None:
    """One line, synced before the service answers: a ticket it wrote survives any crash."""
    path = book()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def current() -> dict[int, dict[str, Any]]:
    """Each ticket as it is now: opened, then perhaps closed."""
    found: dict[int, dict[str, Any]] = {}
    for entry in tickets():
        found.setdefault(entry["id"], {}).update(entry)
    return found


@server.tool()
def find_tickets(query: str) -> str:
    """Find tickets whose title mentions the query (read-only); an empty query lists all."""
    words = query.lower().split()
    hits = [
        f"#{number} {ticket['title']} ({ticket['status']})"
        for number, ticket in current().items()
        if all(word in ticket["title"].lower() for word in words)
    ]
    return "\n".join(hits) if hits else f"No ticket mentions {query!r}."


@server.tool()
async def open_ticket(title: str, idempotency_key: str) -> str:
    """Open a ticket (a side effect; the service applies each idempotency key once)."""
    for ticket in tickets():
        if ticket.get("key") == idempotency_key:
            return (
                f"Ticket #{ticket['id']} is open: {ticket['title']} (the service had it already)."
            )
    number = len(current()) + 1
    write({"id": number, "title": title, "status": "open", "key": idempotency_key})
    await asyncio.sleep(float(os.environ.get("HELPDESK_SECONDS", "3")))
    return f"Ticket #{number} is open: {title}."


@server.tool()
def close_ticket(ticket_id: int, reason: str) -> str:
    """Close a ticket (a side effect a person approves first)."""
    ticket = current().get(ticket_id)
    if ticket is None:
        return f"There is no ticket #{ticket_id}."
    write({"id": ticket_id, "status": "closed", "reason": reason})
    return f"Ticket #{ticket_id} is closed: {reason or 'no reason given'}."


if __name__ == "__main__":
    server.run()  # stdio: the bot starts this process and talks to it on stdin/stdout
