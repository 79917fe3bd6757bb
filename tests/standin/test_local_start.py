"""Local mode's first minutes: a taken port is one line naming the variable (exit code 2),
not a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from testkit.services import free_port


@contextmanager
def listening() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def local_mode(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {
        **os.environ,
        "BOT_DATA_DIR": str(tmp_path / "data"),
        "BOT_STORAGE": "local",
        **env,
    }
    for name in ("OPENAI_API_KEY", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "BOT_TABLE"):
        full.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "bot"], env=full, capture_output=True, text=True, timeout=60
    )


def test_a_taken_page_port_is_one_line_naming_PORT(tmp_path: Path) -> None:
    with listening() as port:
        done = local_mode(tmp_path, PORT=str(port), BOT_LOCAL_BOT_PORT=str(free_port()))
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert f"port {port} is already in use" in line and "set PORT to another port" in line


def test_a_taken_bot_port_is_one_line_naming_BOT_LOCAL_BOT_PORT(tmp_path: Path) -> None:
    with listening() as bot_port:
        done = local_mode(tmp_path, PORT=str(free_port()), BOT_LOCAL_BOT_PORT=str(bot_port))
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert f"port {bot_port} is already in use" in line and "BOT_LOCAL_BOT_PORT" in line


@pytest.mark.parametrize("value", ["abc", "70000"])
def test_a_port_that_is_not_a_port(tmp_path: Path, value: str) -> None:
    done = local_mode(tmp_path, PORT=value)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"local mode: PORT must be a port number (1-65535), not {value!r}"
    )
