"""Two bot processes receiving the same events: one run per thread at a time, each event
handled once, no message lost."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from storage import ConversationKey, Status, Store
from testkit.prefork import popen
from testkit.runtime import history

pytestmark = pytest.mark.slow


def test_two_replicas_same_events(
    store: Store, child_env: Callable[..., dict[str, str]], tmp_path: Path
) -> None:
    keys = [ConversationKey(team="T5", channel="C5", thread_ts=f"{t}.0") for t in range(4)]
    events = [
        {"key": str(key), "event_id": f"Ev{t}-{m}", "text": f"t{t}-m{m}"}
        for t, key in enumerate(keys)
        for m in range(3)
    ]
    events_file = tmp_path / "events.json"
    events_file.write_text(json.dumps(events))
    log = tmp_path / "model.log"
    outs = [tmp_path / f"out{i}.jsonl" for i in range(2)]
    procs = [
        popen(
            [
                sys.executable,
                "-m",
                "testkit.procs",
                "serve_events",
                str(events_file),
                str(log),
                str(out),
            ],
            env=child_env(),
        )
        for out in outs
    ]
    assert [p.wait(180) for p in procs] == [0, 0]
    outcomes = [json.loads(line) for out in outs for line in out.read_text().splitlines()]

    # Each event was kept once: the other replica saw a duplicate.
    duplicates = sorted(o["event_id"] for o in outcomes if o["type"] == "Duplicate")
    assert duplicates == sorted(e["event_id"] for e in events)

    # One run per thread at a time, across both processes (an independent log).
    spans: dict[str, list[tuple[float, float]]] = {}
    open_at: dict[str, float] = {}
    for kind, thread, when in (line.split() for line in log.read_text().splitlines()):
        if kind == "enter":
            assert thread not in open_at, f"two runs at once on {thread}"
            open_at[thread] = float(when)
        else:
            spans.setdefault(thread, []).append((open_at.pop(thread), float(when)))
    assert sorted(spans) == [f"t{t}" for t in range(4)]

    # Every message is in its thread's history exactly once, and got answered.
    for t, key in enumerate(keys):
        items = history(store, key)
        users = sorted(i["content"] for i in items if i.get("role") == "user")
        assert users == [f"<@U1>: t{t}-m{m}" for m in range(3)]
        assert items[-1].get("role") == "assistant"
        record = store.get(key)
        assert record is not None
        assert (record.status, record.lease_owner) == (Status.IDLE, None)
        assert store.read_inbox(key) == []
    answers = [o for o in outcomes if o["type"] == "Answer"]
    assert 4 <= len(answers) <= 12
