"""The long-thread benchmark (`bench.long_thread`), small: its threads are answered with
every request within the window, its windows are measured alike, and its table says so."""

from __future__ import annotations

import pytest

from bench import long_thread

# Made by the seconds a run lasts (a look for a stop, a lease renewal), not by its turns: a
# loaded machine makes some.
TIMED = ("stop_requested", "renew", "get")


async def test_a_short_run_of_the_long_thread_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    [local] = await long_thread.run_long_thread(None, at=(10, 20), turns=2, fresh=1)
    assert local.answered == local.turns == 9 + 19 + 2 * 2 + 2 * 1
    assert local.requests > 2 * local.turns and local.over == 0
    for start in (10, 20):
        window = local.windows[start]
        assert (window.turns, window.answered) == (2, 2)
        # A lookup, then a note (a side effect, checkpointed before it runs, claimed as it
        # starts); the history is in memory: nothing read.
        by_turn = {name: n for name, n in window.calls.items() if name not in TIMED}
        assert by_turn == {
            "keep": 2,
            "commit": 3,
            "begin_tool_call": 1,
            "complete_tool_call": 1,
            "release": 2,
        }
        assert 0 < window.largest <= local.budget and window.written > 0 and window.cpu_s > 0
        fresh = local.fresh[start]
        assert fresh.calls["read_items"] == 1 and 0 < fresh.items_read < 60
    figures = long_thread.report([local], turns=2, fresh=1)
    printed = capsys.readouterr().out
    assert "| local | 10-11 |" in printed and "| local | new replica at 22 |" in printed
    assert "34 of 34 turns answered, 0 of" in printed
    assert figures["local"]["windows"]["20"]["calls"]["commit"] == 1.5
