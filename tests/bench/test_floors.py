"""The floor under a plain answer (`bench.floors`): its parts are measured on the real
clients and stores, and the floor is the plain bot's CPU plus exactly those differences."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import openai._models as client_models
import pytest

from bench import floors
from bench.responses_agent import model_server
from bot.runtime import validating_by_tag
from storage.local import LocalStore

PARTS = {
    "sdk_run_ms": 3.0,
    "sdk_streamed_ms": 3.75,
    "slack_call_ours_ms": 0.25,
    "slack_call_plain_ms": 0.5,
    "write_local_ms": 0.5,
    "write_aws_ms": 1.0,
    "plain_session_ms": 1.0,
}


def test_the_floor_adds_what_ours_does_beyond_the_plain_bot() -> None:
    local = [ms for _, ms in floors.added(PARTS, "local")]
    aws = [ms for _, ms in floors.added(PARTS, "aws")]
    assert local == [0.75, 0.25, 0.5]  # streaming; 3 calls less 1; 3 writes less the session
    assert aws == [0.75, 0.25, 2.0]


def test_the_report_prints_each_floor_and_what_ours_spends_above_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    floors.report_floors(PARTS, 10.0, {"local": 12.0, "aws": 14.0}, {"local": 1.25, "aws": 1.5})
    printed = capsys.readouterr().out
    assert (
        "| local | the floor: the plain bot's 10.00 plus these (1.15x; target ≤ 1.25x) | 11.50 |"
        in (printed)
    )
    assert (
        "| aws | the floor: the plain bot's 10.00 plus these (1.30x; target ≤ 1.50x) | 13.00 |"
        in (printed)
    )
    assert "| local | ours, measured (1.20x): above the floor | +0.50 |" in printed
    assert "| aws | ours, measured (1.40x): above the floor | +1.00 |" in printed


async def test_the_parts_are_measured_on_the_real_client_and_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(floors, "ROUNDS", 1)
    monkeypatch.setattr(floors, "EACH", 3)
    calls = await floors.slack_calls()
    assert set(calls) == {"ours", "plain"} and all(ms > 0 for ms in calls.values())
    store = LocalStore(tmp_path / "ours")
    try:
        assert await floors.durable_write(store) > 0
        assert store.beats()  # the writes landed
    finally:
        store.close()
    assert await floors.plain_session(tmp_path) > 0
    assert (tmp_path / "sessions.db").exists()


async def test_each_kind_is_measured_within_its_own_validation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plain bot's run is measured with the client's own validation, ours with the
    tagged one (`validating_by_tag`), each batch in its own; as found after."""
    monkeypatch.setattr(floors, "ROUNDS", 2)
    monkeypatch.setattr(floors, "EACH", 2)
    seen: dict[str, set[bool]] = {"plain": set(), "ours": set()}

    def noting(name: str) -> Callable[[int], Awaitable[None]]:
        async def work(_: int) -> None:
            seen[name].add(hasattr(client_models._validate_non_model_type, "wrapped"))

        return work

    found = client_models._validate_non_model_type
    await floors.interleaved(
        {
            "plain": floors.Kind(
                noting("plain"), time.thread_time, lambda: validating_by_tag(False)
            ),
            "ours": floors.Kind(noting("ours"), time.thread_time, validating_by_tag),
        }
    )
    assert seen == {"plain": {False}, "ours": {True}}
    assert client_models._validate_non_model_type is found


async def test_the_sdk_runs_are_measured_on_the_real_model_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(floors, "ROUNDS", 1)
    monkeypatch.setattr(floors, "EACH", 3)
    found = client_models._validate_non_model_type
    with model_server() as url:
        runs = await floors.sdk_runs(url)
    assert set(runs) == {"run", "streamed"} and all(ms > 0 for ms in runs.values())
    assert client_models._validate_non_model_type is found
