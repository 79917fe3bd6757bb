"""Bot replicas: real `python -m bot serve` processes in HTTP mode, started, signalled
(SIGKILL, SIGTERM, SIGSTOP/SIGCONT) and restarted by the soak. Each slot keeps its port."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import aiohttp

from bench.chaos.facts import KEYED_ATTEMPTS
from bench.chaos.plan import BACKLOG_LIMIT
from bench.chaos.shapes import STALE_AFTER
from bench.chaos.slack import BOT_TOKEN, CLIENT_ID, CLIENT_SECRET, SECRET
from bench.common import answers_healthz
from testkit.prefork import popen

ROOT = Path(__file__).resolve().parents[2]
ONE_WORKSPACE: dict[str, str | None] = {
    "SLACK_BOT_TOKEN": BOT_TOKEN,
    "SLACK_CLIENT_ID": None,
    "SLACK_CLIENT_SECRET": None,
}
OAUTH: dict[str, str | None] = {
    "SLACK_BOT_TOKEN": None,
    "SLACK_CLIENT_ID": CLIENT_ID,
    "SLACK_CLIENT_SECRET": CLIENT_SECRET,
}
MCP_TIMEOUT = 6.0  # the MCP client's read timeout (CHAOS_MCP_TIMEOUT)
MCP_SLOW_PAY = 8.0  # a slow `pay`'s time at the MCP server: past the client's timeout
KEYED_TIMEOUT = 3.0  # `charge`'s wait for the keyed service (CHAOS_KEYED_TIMEOUT)
KEYED_LATE = 4.5  # how late the keyed service answers a slow `charge` the first time


@dataclass
class Replica:
    slot: int
    port: int
    env: dict[str, str]
    log_path: Path
    command: tuple[str, ...] = (sys.executable, "-m", "bot", "serve")
    process: subprocess.Popen[bytes] | None = None
    stopped: bool = False  # SIGSTOPped, not yet SIGCONTed
    terminating: bool = False  # SIGTERMed, maybe still shutting down
    killed: bool = False  # SIGKILLed, maybe not yet reaped (still `alive` for a moment)
    starts: int = 0
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        assert not self.alive
        if self._log is None:
            self._log = self.log_path.open("ab")
        self._log.write(f"--- start {time.strftime('%H:%M:%S')} ---\n".encode())
        self._log.flush()
        self.process = popen(
            list(self.command),
            cwd=ROOT,
            env=self._named_environment(),
            stdout=self._log,
            stderr=self._log,
        )
        self.stopped = False
        self.terminating = False
        self.killed = False
        self.starts += 1

    def _named_environment(self) -> dict[str, str]:
        """The environment, the model's URL naming this process (`r<slot>p<start>`), so
        that the model server counts each process's requests apart (`BOT_MAX_RUNS`)."""
        base = self.env.get("OPENAI_BASE_URL", "")
        if not base.endswith("/v1"):
            return self.env
        name = f"r{self.slot}p{self.starts + 1}"
        return {**self.env, "OPENAI_BASE_URL": f"{base.removesuffix('/v1')}/{name}/v1"}

    def signal(self, number: signal.Signals) -> None:
        if self.alive:
            assert self.process is not None
            self.process.send_signal(number)
            if number is signal.SIGSTOP:
                self.stopped = True
            elif number is signal.SIGTERM:
                self.terminating = True
            elif number is signal.SIGKILL:
                self.killed = True
            elif number is signal.SIGCONT:
                self.stopped = False

    async def wait_healthy(self, within: float = 60) -> bool:
        deadline = time.monotonic() + within
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while time.monotonic() < deadline:
                if not self.alive:
                    return False
                if await answers_healthz(http, self.url):
                    return True
                await asyncio.sleep(0.1)
        return False

    async def stop(self, grace: float = 15) -> None:
        """SIGCONT (if stopped), SIGTERM, then SIGKILL after `grace` seconds."""
        if self.alive:
            assert self.process is not None
            if self.stopped:
                self.signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            if not await self.wait_exit(grace):
                self.process.kill()
                self.process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    async def wait_exit(self, within: float) -> bool:
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(self.process.wait, within)
        return not self.alive


def bot_environment(
    *,
    port: int,
    slack_url: str,
    model_url: str,
    storage: dict[str, str],
    ledger: Path,
    transfer_delay: float,
    lease_seconds: float,
    keyed_url: str,
    mcp_effects: Path,
) -> dict[str, str]:
    env = {
        **os.environ,
        **storage,
        "PYTHONPATH": str(ROOT),
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": f"{slack_url}/api/",
        "PORT": str(port),
        "HOST": "127.0.0.1",
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": f"{model_url}/v1",
        "BOT_MODEL": "chaos-scripted",
        "BOT_AGENT": "bench.chaos.agent:build_agent",
        "BOT_LEASE_SECONDS": str(lease_seconds),
        "BOT_LEASE_SKEW_SECONDS": "0",
        "BOT_DUPLICATE_CHECK_SECONDS": "1",  # done within the quiet period a run ends with
        "BOT_STATE_TTL": "1h",  # runs of the expiry workload shorten it (`Cluster.configure`)
        "BOT_BACKLOG_LIMIT": str(BACKLOG_LIMIT),  # only a burst of replies goes past it
        "BOT_ADMINS": "UADMIN",
        "BOT_APPROVERS": "UCAROL",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
        "BOT_IDEMPOTENT_ATTEMPTS": str(KEYED_ATTEMPTS),
        "CHAOS_LEDGER": str(ledger),
        "CHAOS_TRANSFER_DELAY": str(transfer_delay),
        "CHAOS_KEYED_URL": keyed_url,
        "MCP_EFFECTS_FILE": str(mcp_effects),  # the MCP server's (a child of each replica)
        "MCP_PAY_SECONDS": str(transfer_delay / 2),
        "MCP_SLOW_PAY_SECONDS": str(MCP_SLOW_PAY),
        "CHAOS_MCP_TIMEOUT": str(MCP_TIMEOUT),
        "CHAOS_KEYED_TIMEOUT": str(KEYED_TIMEOUT),
        "BOT_STALE_AFTER": f"{STALE_AFTER:g}s",
        "LOG_LEVEL": "INFO",
    }
    for name in ("SLACK_APP_TOKEN", "SLACK_CLIENT_ID", "SLACK_CLIENT_SECRET"):
        env.pop(name, None)
    return env
