"""What local mode refuses or cannot do: a start-up problem told in one line (`python -m bot`
exits with code 2), a port that is taken, and a request of the page's that is refused."""

from __future__ import annotations

import errno
import socket

LOOPBACK = "127.0.0.1"  # the page signs requests as anyone: this machine only


class LocalModeError(Exception):
    """A start-up problem, told in one line; `python -m bot` exits with code 2."""


class PageRequestRefused(Exception):
    """A request of the page's that is refused: answered with `status` and `error`."""

    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


def port_in_use(port: int, variable: str, what: str, exc: OSError) -> LocalModeError:
    if exc.errno == errno.EADDRINUSE:
        return LocalModeError(
            f"{what} port {port} is already in use on {LOOPBACK} (is local mode already "
            f"running?); set {variable} to another port, e.g. {variable}={port + 10}"
        )
    return LocalModeError(
        f"cannot listen on {LOOPBACK}:{port} for {what} ({exc.strerror or exc}); "
        f"set {variable} to another port"
    )


def check_port_free(port: int, variable: str, what: str) -> None:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
        try:
            probe.bind((LOOPBACK, port))
        except OSError as exc:
            raise port_in_use(port, variable, what, exc) from exc
