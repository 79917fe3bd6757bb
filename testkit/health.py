"""Child bot processes: waiting for one to answer `GET /healthz` (one place, with a
deadline in seconds, not a count of polls, so a busy machine, several test workers on 2
cores, slows the wait down instead of failing it), and stopping them."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

import aiohttp

HEALTHY_WITHIN = 90.0  # a cold start on a loaded 2-core machine has taken over 30 s


async def wait_healthy(
    url: str,
    process: subprocess.Popen[bytes],
    log: Path | None = None,
    seconds: float = HEALTHY_WITHIN,
) -> float:
    """Poll `url`/healthz until it answers 200; the moment it did. Fails at once, with the
    log's tail, if the process exits first."""
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(
                    f"the bot exited ({process.returncode}) before healthy\n{_tail(log)}"
                )
            try:
                timeout = aiohttp.ClientTimeout(total=5)
                async with http.get(f"{url}/healthz", timeout=timeout) as response:
                    if response.status == 200:
                        return time.monotonic()
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.05)
    raise TimeoutError(f"the bot at {url} never became healthy within {seconds:.0f}s")


def _tail(log: Path | None) -> str:
    return log.read_text()[-3000:] if log is not None and log.exists() else ""


async def stop_children(processes: list[subprocess.Popen[bytes]], grace: float = 30) -> None:
    """SIGTERM what still runs, then SIGKILL what outlives `grace`. The waits go to a
    thread: a stand-in on this event loop keeps answering the stopping processes."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, grace)
            except subprocess.TimeoutExpired:
                process.kill()
