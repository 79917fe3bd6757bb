"""Local mode's first minutes: a taken port is one line naming the variable (exit code 2),
not a traceback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
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


def test_ctrl_c_while_the_bot_is_starting_stops_at_once(tmp_path: Path) -> None:
    """Ctrl-C while the bot behind the page is still starting (many seconds on a loaded
    machine; here its agent module takes a minute to import): local mode ends at once, and
    leaves no bot running."""
    (tmp_path / "slow_agent.py").write_text(  # a bot that takes 60 s to start
        "import time\ntime.sleep(60)\n\ndef agent():\n    raise SystemExit\n"
    )
    full = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "BOT_AGENT": "slow_agent:agent",
        "PORT": str(free_port()),
        "BOT_LOCAL_BOT_PORT": str(free_port()),
        "BOT_DATA_DIR": str(tmp_path / "data"),
        "BOT_STORAGE": "local",
    }
    for name in ("OPENAI_API_KEY", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "BOT_TABLE"):
        full.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "bot"], env=full, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert "local mode: open" in first, first
        process.send_signal(signal.SIGINT)
        began = time.monotonic()
        code = process.wait(15)
        took = time.monotonic() - began
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code in (0, -signal.SIGINT) and took < 10, (code, took)
    marker = f"BOT_DATA_DIR={tmp_path / 'data'}".encode()
    assert not processes_with(marker)  # the bot it was starting is gone too


def processes_with(marker: bytes) -> list[int]:
    """The live processes whose environment holds `marker` (this test's own data dir)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found
