"""Every test of the SDK's here (see README.md) runs on both backends: one store each for the
whole run (DynamoDB Local and moto's S3 shared with the rest of the suite), each test in a
workspace of its own (see `sessions`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import StorageSettings, Store, open_store
from storage.aws import create_resources
from tests.storage.sdk_conformance.sessions import bound


def pytest_configure(config: pytest.Config) -> None:
    # The SDK's own conftest lets a test marked so call a real model class (here: against an
    # in-process transport); it is not vendored, and nothing else here calls one.
    config.addinivalue_line("markers", "allow_call_model_methods: from the SDK's tests")


@pytest.fixture(scope="session", params=["local", "aws"])
def conformance_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Store]:
    if request.param == "local":
        data_dir: Path = tmp_path_factory.mktemp("sdk-conformance") / "data"
        settings = StorageSettings(storage="local", data_dir=str(data_dir))
    else:
        request.getfixturevalue("aws_services")
        suffix = uuid.uuid4().hex[:12]
        table, bucket = f"sdk-{suffix}", f"sdk-{suffix}"
        create_resources(table, bucket)
        settings = StorageSettings(storage="aws", table=table, bucket=bucket)
    store = open_store(settings)
    yield store
    store.close()


@pytest.fixture(autouse=True)
def store_under_test(conformance_store: Store) -> Iterator[Store]:
    with bound(conformance_store):
        yield conformance_store
