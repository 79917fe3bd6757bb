from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from storage import StorageSettings, Store, open_store
from storage.aws import create_resources
from storage.local import LocalStore
from testkit.runtime import SideEffects
from testkit.services import aws_environment, dynamodb_local, environment, moto_s3

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")


@pytest.fixture(scope="session")
def aws_services() -> Iterator[dict[str, str]]:
    """DynamoDB Local and moto S3 for the whole run; their variables go into os.environ so
    that child processes reach them the way production code does."""
    with dynamodb_local() as dynamodb_url, moto_s3() as s3_url:
        env = aws_environment(dynamodb_url, s3_url)
        with environment(env):
            yield env


@dataclass
class Backend:
    """One configured storage backend; `env` configures a child process the same way."""

    name: str
    env: dict[str, str]
    opened: list[Store] = field(default_factory=list)

    def open(self, **overrides: Any) -> Store:
        values = {k.removeprefix("BOT_").lower(): v for k, v in self.env.items()}
        settings = StorageSettings(**(values | overrides))
        store = open_store(settings)
        self.opened.append(store)
        return store


@pytest.fixture(params=["local", "aws"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "local":
        env = {"BOT_STORAGE": "local", "BOT_DATA_DIR": str(tmp_path / "data")}
    else:
        request.getfixturevalue("aws_services")
        suffix = uuid.uuid4().hex[:12]
        env = {"BOT_STORAGE": "aws", "BOT_TABLE": f"t-{suffix}", "BOT_BUCKET": f"b-{suffix}"}
        create_resources(env["BOT_TABLE"], env["BOT_BUCKET"])
    chosen = Backend(request.param, env)
    yield chosen
    for store in chosen.opened:
        store.close()


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.open(lease_seconds=5, lease_skew_seconds=0.2)


@pytest.fixture
def child_env(backend: Backend) -> Callable[..., dict[str, str]]:
    def make(**extra: str) -> dict[str, str]:
        return {**os.environ, **backend.env, "PYTHONPATH": str(Path.cwd()), **extra}

    return make


@pytest.fixture
def local_store(tmp_path: Path) -> Iterator[LocalStore]:
    """The embedded backend in a fresh directory, `tmp_path / "data"`."""
    store = LocalStore(tmp_path / "data")
    yield store
    store.close()


@pytest.fixture
def effects(tmp_path: Path) -> SideEffects:
    """The test agents' tool executions, counted in a file outside every process."""
    return SideEffects(tmp_path / "effects.jsonl")
