"""A small MCP server for tests: `python -m testkit.mcp_server [--http PORT]` (stdio by
default, streamable HTTP on 127.0.0.1:PORT with `--http`).

`pay` is a side effect (tests give it `require_approval`); `balance` is read-only. Every
execution is appended to `$MCP_EFFECTS_FILE` (outside every process), after which `pay`
takes `$MCP_PAY_SECONDS` to answer, so that a signal can land right after its effect (a
`pay` to a recipient that says `slow` takes `$MCP_SLOW_PAY_SECONDS`, when set: longer than
a client waits).
The server appends its pid to `$MCP_PIDS_FILE` when it starts; while the file
`$MCP_FAIL_WHILE` exists it exits at once (a server that is down, then back).
`$MCP_PAY_CURRENCY=1` gives `pay` a required `currency` argument (a changed tool schema).
`charge` is a keyed side effect, as payment APIs have them: it applies each
`idempotency_key` once (the keys it applied are kept in `$MCP_KEYS_FILE`, outside every
process) and answers a repeated key with the first result, at once."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


def record(tool: str, **arguments: Any) -> None:
    path = os.environ.get("MCP_EFFECTS_FILE")
    if not path:
        return
    line = json.dumps({"tool": tool, "pid": os.getpid(), **arguments}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _applied_keys() -> dict[str, str]:
    path = os.environ.get("MCP_KEYS_FILE")
    if not path or not Path(path).exists():
        return {}
    lines = Path(path).read_text().splitlines()
    return {entry["key"]: entry["result"] for entry in map(json.loads, lines)}


def _remember_key(key: str, result: str) -> None:
    path = os.environ.get("MCP_KEYS_FILE")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps({"key": key, "result": result}) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def build() -> MCPServer:
    from mcp.server.mcpserver import MCPServer  # (not imported by a server that fails at once)

    server = MCPServer("payments")

    currency_required = os.environ.get("MCP_PAY_CURRENCY") == "1"

    def pay_seconds(to: str) -> float:
        slow = os.environ.get("MCP_SLOW_PAY_SECONDS")
        if slow and "slow" in to.split():
            return float(slow)
        return float(os.environ.get("MCP_PAY_SECONDS", "0"))

    async def pay(amount: int, to: str) -> str:
        """Pay someone (a side effect)."""
        record("pay", amount=amount, to=to)
        await asyncio.sleep(pay_seconds(to))
        return f"paid {amount} to {to}"

    async def pay_in(amount: int, to: str, currency: str) -> str:
        """Pay someone (a side effect)."""
        record("pay", amount=amount, to=to, currency=currency)
        await asyncio.sleep(pay_seconds(to))
        return f"paid {amount} {currency} to {to}"

    server.tool(name="pay")(pay_in if currency_required else pay)

    @server.tool()
    async def charge(amount: int, to: str, idempotency_key: str) -> str:
        """Charge someone (a side effect the service applies once per idempotency key)."""
        applied = _applied_keys()
        if idempotency_key in applied:
            return applied[idempotency_key]
        record("charge", amount=amount, to=to, key=idempotency_key)
        result = f"charged {amount} to {to}"
        _remember_key(idempotency_key, result)
        await asyncio.sleep(float(os.environ.get("MCP_PAY_SECONDS", "0")))
        return result

    @server.tool()
    def balance(account: str) -> str:
        """An account's balance (read-only)."""
        record("balance", account=account)
        return f"{account} has 100"

    return server


def main(argv: list[str]) -> None:
    fail_while = os.environ.get("MCP_FAIL_WHILE")
    if fail_while and Path(fail_while).exists():
        sys.exit(3)
    pids = os.environ.get("MCP_PIDS_FILE")
    if pids:
        with open(pids, "a") as handle:
            handle.write(f"{os.getpid()}\n")
    server = build()
    if argv[:1] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
