"""`python -m MODULE ...` child processes started warm: forked from `prefork_server`, which has
the heavy libraries imported already, instead of a fresh interpreter importing them again
(about 4.5 s of CPU per bot, a few hundred bots per suite, on two cores).

`popen(command, ...)` is `subprocess.Popen(command, ...)` for tests: a command of the form
`[sys.executable, "-m", MODULE, *args]` is forked there, anything else (or any use of
arguments it does not take) runs as usual. The handle it returns is a `subprocess.Popen`:
`pid`, `poll`, `wait`, `send_signal`, `terminate`, `kill`, `returncode` and `communicate`
behave as they do for any child; the process is real (SIGKILL, SIGSTOP and SIGTERM reach it,
its exit status is its own). `DEV_PREFORK=0` turns it off: every command then runs as is
(a test of `python -m bot` itself, e.g. the CLI's, does not use this)."""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parent.parent
SERVER = Path(__file__).with_name("prefork_server.py")
OWN = ("bot", "storage", "testkit", "bench", "examples", "tests")
WARM = ("bot.cli", "bot.wiring", "bot.slackapp.server", "storage.aws", "storage.local")
READY_WITHIN = 120.0

Stream = int | IO[Any] | None


def popen(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdout: Stream = None,
    stderr: Stream = None,
    cwd: str | Path | None = None,
) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(command, env=env, stdout=stdout, stderr=stderr, cwd=cwd)`, forked
    from the warm interpreter when `command` runs a module with this interpreter."""
    module = _module_of(command)
    server = _server() if module is not None else None
    if server is None or module is None:
        return subprocess.Popen(list(command), env=env, stdout=stdout, stderr=stderr, cwd=cwd)
    return server.start(
        list(command),
        module,
        list(command[3:]),
        env=dict(os.environ if env is None else env),
        cwd=str(cwd or os.getcwd()),
        stdout=stdout,
        stderr=stderr,
    )


def run(command: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float) -> int:
    """`subprocess.run(command, env=env, timeout=timeout).returncode`, warm."""
    process = popen(command, env=env)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


def _module_of(command: Sequence[str]) -> str | None:
    if os.environ.get("DEV_PREFORK", "1") == "0":
        return None
    if len(command) >= 3 and command[0] == sys.executable and command[1] == "-m":
        return command[2]
    return None


class Forked(subprocess.Popen[bytes]):
    """A child of the warm interpreter, handled as a `subprocess.Popen`: its exit status
    comes over `conn` (the warm interpreter reaps it)."""

    def __init__(
        self, args: list[str], pid: int, conn: socket.socket, stdout: IO[bytes] | None
    ) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdin = None
        self.stdout = stdout
        self.stderr = None
        self.text_mode = False
        self.encoding = None
        self.errors = None
        self.universal_newlines = False
        self._conn = conn
        self._status_lock = threading.Lock()
        self._child_created = False
        self._communication_started = False
        self._sigint_wait_secs = 0.25
        self._closed_child_pipe_fds = True
        self._input = None
        self._fileobj2output: dict[Any, Any] = {}

    def _internal_poll(self, *_: Any, **__: Any) -> int | None:
        return self._status(0)

    def _wait(self, timeout: float | None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            code = self._status(0.2 if left is None else min(left, 0.2))
            if code is not None:
                return code
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)

    def _status(self, timeout: float) -> int | None:
        if not self._status_lock.acquire(timeout=max(timeout, 0.01)):
            return self.returncode
        try:
            if self.returncode is not None:
                return self.returncode
            ready, _, _ = select.select([self._conn], [], [], timeout)
            if ready:
                data = self._conn.recv(4096)
                self.returncode = (
                    int(json.loads(data)["returncode"]) if data else self._lost_status()
                )
                self._conn.close()
            return self.returncode
        finally:
            self._status_lock.release()

    def _lost_status(self) -> int:
        """The warm interpreter died before telling: the child's fate is unknown."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return 255
        raise RuntimeError(f"the warm interpreter is gone; {self.pid} still runs")

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def __del__(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None and conn.fileno() >= 0:
            conn.close()


class _Server:
    def __init__(self, process: subprocess.Popen[bytes], path: str) -> None:
        self.process = process
        self.path = path

    def start(
        self,
        args: list[str],
        module: str,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: str,
        stdout: Stream,
        stderr: Stream,
    ) -> subprocess.Popen[bytes]:
        opened: list[int] = []
        pipe_read: int | None = None

        def fd_of(stream: Stream, default: int) -> int:
            nonlocal pipe_read
            if stream is None:
                return default
            if stream == subprocess.PIPE:
                read, write = os.pipe()
                pipe_read = read
                opened.append(write)
                return write
            if stream == subprocess.DEVNULL:
                fd = os.open(os.devnull, os.O_RDWR)
                opened.append(fd)
                return fd
            if isinstance(stream, int):
                return stream
            stream.flush()
            return stream.fileno()

        devnull = os.open(os.devnull, os.O_RDONLY)
        opened.append(devnull)
        out = fd_of(stdout, 1)
        err = out if stderr == subprocess.STDOUT else fd_of(stderr, 2)
        request = {"module": module, "args": argv, "env": env, "cwd": cwd}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(self.path)
            socket.send_fds(conn, [json.dumps(request).encode()], [devnull, out, err])
            reply = conn.recv(4096)
        finally:
            for fd in opened:
                os.close(fd)
        if not reply:
            conn.close()
            raise RuntimeError("the warm interpreter did not start the child")
        pid = int(json.loads(reply)["pid"])
        pipe = os.fdopen(pipe_read, "rb") if pipe_read is not None else None
        return Forked(args, pid, conn, pipe)


_lock = threading.Lock()
_servers: dict[int, _Server | None] = {}  # by the pid that started it (a fork starts its own)


def _server() -> _Server | None:
    with _lock:
        if os.getpid() not in _servers:
            _servers[os.getpid()] = _start_server()
        return _servers[os.getpid()]


def _start_server() -> _Server | None:
    folder = tempfile.mkdtemp(prefix="prefork-")
    path = os.path.join(folder, "socket")
    command = [
        sys.executable,
        str(SERVER),
        path,
        "--own",
        ",".join(OWN),
        "--warm",
        ",".join(WARM),
    ]
    process = subprocess.Popen(
        command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ)
    )
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], READY_WITHIN)
    line = process.stdout.readline().decode().strip() if ready else ""
    if line != "ready":
        log.warning("warm interpreter not ready (%r): children start cold", line)
        process.kill()
        process.wait()
        return None
    atexit.register(_stop_server, process)
    return _Server(process, path)


def _stop_server(process: subprocess.Popen[bytes]) -> None:
    if process.stdin is not None:
        process.stdin.close()  # it returns when its stdin closes
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
