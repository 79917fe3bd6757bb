"""The soak's cluster keeps its promise that `heal` leaves the wanted replicas up: real child
processes (a tiny health server standing in for the bot), real signals."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

from bench.chaos.faults import Cluster
from bench.chaos.processes import Replica
from testkit.services import free_port

# Answers 200 at /healthz on $PORT once it has slept $BOOT seconds (a replica starting).
HEALTH_SERVER = """
import http.server, os, time
time.sleep(float(os.environ.get("BOOT", "0")))
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Health).serve_forever()
"""


def _replica(tmp_path: Path, boot: float = 0.0) -> Replica:
    port = free_port()
    env = {**os.environ, "PORT": str(port), "BOOT": str(boot)}
    return Replica(
        0, port, env, tmp_path / "replica.log", command=(sys.executable, "-c", HEALTH_SERVER)
    )


async def test_a_replica_sigkilled_just_before_the_heal_is_started_again(tmp_path: Path) -> None:
    replica = _replica(tmp_path)
    cluster = Cluster([replica])
    try:
        await cluster.ensure(1)
        assert replica.process is not None
        killed = replica.process.pid
        replica.signal(signal.SIGKILL)  # not yet reaped: it still looks alive for a moment
        await cluster.ensure(1)  # what `heal` does next
        assert replica.alive and replica.process.pid != killed
        assert replica.starts == 2
    finally:
        await cluster.shutdown()


async def test_a_restart_cancelled_while_starting_is_waited_for(tmp_path: Path) -> None:
    replica = _replica(tmp_path, boot=1.0)
    cluster = Cluster([replica])
    try:
        with contextlib.suppress(TimeoutError):  # `heal` cancels a pending restart
            await asyncio.wait_for(cluster.start(replica), timeout=0.3)
        assert replica.alive  # started, not healthy yet
        await cluster.ensure(1)
        assert await replica.wait_healthy(within=0.5)  # up when `ensure` returns
        assert replica.starts == 1
    finally:
        await cluster.shutdown()
