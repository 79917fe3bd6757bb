"""The floor under a plain answer (`bench.floors`): its parts are measured on the real
clients and stores, and the floor is the plain bot's CPU plus exactly those differences."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bench import floors
from bench.cpu import model_server
from bot.runtime import tagged_unions
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


async def test_the_sdk_runs_are_measured_each_as_its_bot_validates_and_then_left_as_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(floors, "ROUNDS", 1)
    monkeypatch.setattr(floors, "EACH", 3)
    seen: dict[str, bool] = {}
    validation = floors.validation

    def checking(ours: bool) -> Callable[[], None]:
        choose = validation(ours)

        def check() -> None:
            choose()
            current = tagged_unions.client_validate()
            assert current is not None
            seen["ours" if ours else "plain"] = current is not tagged_unions.unwrapped(current)

        return check

    monkeypatch.setattr(floors, "validation", checking)
    found = tagged_unions.client_validate()
    with model_server() as url:
        runs = await floors.sdk_runs(url)
    assert set(runs) == {"run", "streamed"} and all(ms > 0 for ms in runs.values())
    assert seen == {"plain": False, "ours": True}  # the shim only for ours' streamed run
    assert tagged_unions.client_validate() is found
