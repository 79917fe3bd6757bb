"""A warm interpreter that forks `python -m MODULE ARGS...` processes for the tests.

    python testkit/prefork_server.py SOCKET --own bot,storage,... --warm bot.cli,...

Every child bot spent about 4.5 s of CPU importing the Agents SDK, openai, mcp, slack_bolt and
boto3 before it did anything, and the suite starts a few hundred of them on two cores. This
process imports those libraries once (never our own packages: a child imports them fresh,
with its own environment), then forks one child per request on SOCKET. A child is a real
process of its own (its pid, signals, exit status, open files): it applies the environment,
working directory, arguments and standard streams it was sent, and runs the module as
`python -m` does (`runpy`). Its exit status goes back on the request's connection.

Run as a script, not as part of `testkit`: nothing of ours is imported here. `--warm` names
our modules whose third-party imports are wanted: a forked child imports them (and exits),
reports the new third-party modules, and this process imports those too."""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
import traceback
from typing import Any

BASE = ("agents", "openai", "mcp", "slack_bolt", "slack_sdk", "boto3", "aiohttp", "pydantic")
MAX_MESSAGE = 1 << 20


def main(argv: list[str]) -> int:
    path, own, warm = argv[0], _option(argv, "--own"), _option(argv, "--warm")
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here()]
    for name in BASE:
        _import(name)
    for name in _third_party_of(warm, own):
        _import(name)
    if threading.active_count() != 1:  # a thread would be missing from every child
        print(f"not ready: {threading.active_count()} threads after imports", flush=True)
        return 1
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        readable = select.select([listener.fileno(), wake_r, 0], [], [])[0]
        if 0 in readable and not os.read(0, 1):
            return 0  # whoever started this is gone
        if wake_r in readable:
            os.read(wake_r, 4096)
            _reap(children)
        if listener.fileno() in readable:
            conn, _ = listener.accept()
            _fork(conn, listener, children, (wake_r, wake_w))


def _fork(
    conn: socket.socket,
    listener: socket.socket,
    children: dict[int, socket.socket],
    wake: tuple[int, int],
) -> None:
    try:
        message, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 3)
        request = json.loads(message)
    except (OSError, ValueError):
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        listener.close()
        conn.close()
        for fd in wake:
            os.close(fd)
        _run_child(request, fds)  # never returns
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    conn.send(json.dumps({"pid": pid}).encode())
    _reap(children)


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
            conn.close()


def _run_child(request: dict[str, Any], fds: list[int]) -> None:
    """Become `python -m MODULE ARGS` with the request's environment and streams."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if request.get("new_session"):
            os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 65536)
        env: dict[str, str] = request["env"]
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(env)
        extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [os.getcwd(), *extra, *[p for p in sys.path if p not in extra]]
        sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
        if env.get("PYTHONUNBUFFERED"):
            for stream in (sys.stdout, sys.stderr):
                stream.reconfigure(write_through=True)  # type: ignore[union-attr]
        _fresh_sdk_settings()
        sys.argv = ["-m", *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as done:
        code = _exit_code(done.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter's exit
            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


def _fresh_sdk_settings() -> None:
    """The Agents SDK reads OPENAI_AGENTS_DISABLE_TRACING once, on first use: a child reads
    its own."""
    with contextlib.suppress(Exception):
        from agents.tracing import get_trace_provider

        provider: Any = get_trace_provider()
        if hasattr(provider, "_env_disabled"):
            provider._env_disabled = None
            provider._refresh_disabled_flag()


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _third_party_of(modules: list[str], own: list[str]) -> list[str]:
    """The third-party modules that importing `modules` brings in (learned in a child)."""
    if not modules:
        return []
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        before = set(sys.modules)
        for name in modules:
            _import(name)
        mine = tuple(own)
        found = [
            name
            for name in sys.modules
            if name not in before and name.split(".")[0] not in mine and name != "__main__"
        ]
        with os.fdopen(write, "w") as out:
            out.write("\n".join(found))
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        names = answer.read().split()
    os.waitpid(pid, 0)
    return names


def _import(name: str) -> None:
    with contextlib.suppress(Exception):
        importlib.import_module(name)


def _option(argv: list[str], flag: str) -> list[str]:
    if flag not in argv:
        return []
    value = argv[argv.index(flag) + 1]
    return [part for part in value.split(",") if part]


def _here() -> str:
    return os.path.dirname(os.path.abspath(__file__))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
