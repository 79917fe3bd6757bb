"""The container image, as far as it can be tested without a Docker engine: the Dockerfile's
shape, and the entry point and health check it runs, against a real bot."""

from __future__ import annotations

import asyncio
import os
import re
import sys

from storage.local import LocalStore
from testkit.runtime import SideEffects, build_agent, echo_model
from testkit.services import ROOT, free_port
from testkit.slack import runtime_of, slack_bot

DOCKERFILE = (ROOT / "infra" / "Dockerfile").read_text()


def instruction(name: str) -> list[str]:
    joined = DOCKERFILE.replace("\\\n", " ")
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.startswith(name + " ")]


def test_dockerfile_shape() -> None:
    assert re.fullmatch(r"python:3\.1[1-9]-slim", instruction("FROM")[0])
    [user] = instruction("USER")
    assert user not in ("root", "0")
    assert 'ENTRYPOINT ["python", "-m", "bot", "serve"]' in DOCKERFILE
    assert '"python", "-m", "bot.healthcheck"' in instruction("HEALTHCHECK")[0]
    copied = {line.split()[0] for line in instruction("COPY")}
    assert {"storage", "bot", "pyproject.toml"} <= copied
    assert any("requirements.lock" in line.split() for line in instruction("COPY"))
    # The runtime dependencies only (no extra: the test tools), at the locked versions.
    [install] = [run for run in instruction("RUN") if "pip install" in run]
    assert re.search(r"\bpip install -c requirements\.lock \.(\s|$)", install), install


async def run_healthcheck(port: int) -> int:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.healthcheck",
        env={**os.environ, "PORT": str(port)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    return await process.wait()


async def test_healthcheck_against_a_running_bot(
    local_store: LocalStore, effects: SideEffects
) -> None:
    runtime = runtime_of(local_store, build_agent(echo_model(), effects))
    async with slack_bot(local_store, runtime) as bot:
        port = int(bot.bot_url.rsplit(":", 1)[1])
        assert await run_healthcheck(port) == 0
    assert await run_healthcheck(port) == 1  # stopped: unhealthy
    assert await run_healthcheck(free_port()) == 1
