"""The package as `pip install .` ships it: a wheel built from pyproject.toml, installed into a
fresh virtual environment outside the repository, runs its console script and local mode
from another directory. Catches package data (the SQL schema, the stand-in's page) that the
source tree has but the wheel would leave out."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import urllib.request
import zipfile
from pathlib import Path

import pytest

from testkit.services import ROOT, free_port, stop_process, wait_until

PACKAGE_DATA = ("storage/local/schema.sql", "bot/standin/page.html", "bot/standin/favicon.svg")
PAGE_TITLE = "<title>Local Slack · #general</title>"
pytestmark = pytest.mark.slow


def build_wheel(tmp_path: Path) -> Path:
    """Build from a copy of what the Dockerfile copies (and of `testkit/`, a package beside
    them that must not be shipped), so the build leaves nothing in the repository. Without
    build isolation: offline, with the test environment's setuptools."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for package in ("bot", "storage", "testkit"):
        shutil.copytree(
            ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    dist = tmp_path / "dist"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index"]
    build = subprocess.run(
        [*pip_wheel, "--no-build-isolation", "-w", str(dist), str(source)],
        capture_output=True,
        text=True,
    )
    # setuptools builds wheels by itself from 70.1 on; the test extra brings such a version.
    assert build.returncode == 0, build.stdout + build.stderr
    [wheel] = dist.glob("durable_slack_agent-*.whl")
    return wheel


def fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    """A new virtual environment with the wheel installed (no dependencies fetched): the
    test environment's site-packages is appended to its path for the dependencies. That is
    a plain path line, so the `.pth` files there (the repository's editable install) are
    not processed and cannot shadow the wheel."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    install = subprocess.run(  # clean: a PYTHONPATH at the repository shows it installed
        [*pip, "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert install.returncode == 0, install.stdout + install.stderr
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv)}))
    assert site.is_dir()
    (site / "test_environment.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without anything that would reach the repository's code or
    real services, or configure Slack, OpenAI or AWS storage."""
    dropped = ("PYTHONPATH", "SLACK_", "OPENAI_", "BOT_", "AWS_ENDPOINT_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    return env | {"OPENAI_AGENTS_DISABLE_TRACING": "1"} | extra


def test_wheel_installs_and_runs_local_mode_elsewhere(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    shipped = set(zipfile.ZipFile(wheel).namelist())
    missing = [name for name in PACKAGE_DATA if name not in shipped]
    assert not missing, f"the wheel leaves out {missing}"
    top_level = {name.split("/", 1)[0] for name in shipped}
    packages = {name for name in top_level if not name.endswith(".dist-info")}
    assert packages == {"bot", "storage"}, f"the wheel ships {packages}"

    venv = fresh_venv(tmp_path, wheel)
    python = str(venv / "bin" / "python")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*command: str) -> str:
        done = subprocess.run(
            command, cwd=elsewhere, env=clean_env(), capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    where = run(python, "-c", "import bot, storage; print(bot.__file__); print(storage.__file__)")
    for path in where.split():
        assert Path(path).is_relative_to(venv), f"{path} is not the installed wheel's"
    assert "python -m bot" in run(str(venv / "bin" / "slack-agent-bot"), "--help")
    assert "local mode" in run(python, "-m", "bot", "--help")

    # Local mode, the way `./dev bot` starts it: the stand-in page and embedded storage.
    port = free_port()
    data = tmp_path / "data"
    env = clean_env(
        PORT=str(port),
        BOT_LOCAL_BOT_PORT=str(free_port()),
        BOT_DATA_DIR=str(data),
        BOT_STORAGE="local",
    )
    log_path = tmp_path / "local.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [python, "-m", "bot"], cwd=elsewhere, env=env, stdout=log, stderr=log
        )
    try:

        def serving() -> bool:
            assert process.poll() is None, log_path.read_text()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
                page = response.read().decode()
            assert PAGE_TITLE in page
            return (data / "state.sqlite3").exists()

        wait_until(serving, seconds=30)
    finally:
        stop_process(process, signal.SIGINT, 20)  # Ctrl-C: stops the stand-in and the bot
    assert process.returncode in (0, -signal.SIGINT), log_path.read_text()
