"""Installation documents, one-time states and a team's conversations: the contract, run
against both backends."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from storage import ConversationKey, Status, Store
from storage.installations import Removal
from storage.local import LocalStore

PLAIN = ConversationKey(team="TA", channel="C1", thread_ts="1700000000.000100")
OTHER = ConversationKey(team="TB", channel="C2", thread_ts="1700000000.000200")
GRID = ConversationKey(enterprise="E1", team="TA", channel="C3", thread_ts="1700000000.000300")
GRID_2 = ConversationKey(enterprise="E1", team="TC", channel="C4", thread_ts="1700000000.0004")


def test_installations_are_kept_replaced_and_deleted(store: Store) -> None:
    assert store.find_installation("E1:TA") is None
    first = json.dumps({"bot_token": "xoxb-1", "scopes": ["chat:write"]})
    store.save_installation("E1:TA", first)
    store.save_installation("-:TA", json.dumps({"bot_token": "xoxb-other"}))
    assert store.find_installation("E1:TA") == first
    # A re-install replaces the document whole: the latest wins.
    latest = json.dumps({"bot_token": "xoxb-2", "scopes": ["chat:write", "commands"]})
    store.save_installation("E1:TA", latest)
    assert store.find_installation("E1:TA") == latest
    assert store.delete_installation("E1:TA") is True
    assert store.find_installation("E1:TA") is None
    assert store.delete_installation("E1:TA") is False
    assert store.find_installation("-:TA") == json.dumps({"bot_token": "xoxb-other"})
    # Not affected by the state TTL: a document outlives every conversation.
    later = store.clock() + store.state_ttl * 10
    store.clock = lambda: later
    assert store.find_installation("-:TA") is not None


def test_installation_ids_and_documents_are_bounded(store: Store) -> None:
    with pytest.raises(ValueError):
        store.save_installation("", "{}")
    with pytest.raises(ValueError):
        store.save_installation("x" * 600, "{}")
    with pytest.raises(ValueError):
        store.save_installation("big", "x" * 400_000)


def test_a_state_is_consumed_once(store: Store) -> None:
    store.issue_state("s-1", timedelta(minutes=10))
    store.issue_state("s-2", timedelta(minutes=10))
    assert store.consume_state("s-1") is True
    assert store.consume_state("s-1") is False  # a replayed redirect
    assert store.consume_state("never-issued") is False
    assert store.consume_state("s-2") is True


def test_an_expired_state_is_refused(store: Store) -> None:
    store.issue_state("old", timedelta(seconds=60))
    now = store.clock()
    store.clock = lambda: now + timedelta(seconds=61)
    assert store.consume_state("old") is False


def test_of_two_issues_of_one_state_one_wins_until_it_expires(store: Store) -> None:
    assert store.issue_state("spent:n1", timedelta(seconds=60)) is True
    assert store.issue_state("spent:n1", timedelta(seconds=600)) is False  # a replay
    now = store.clock()
    store.clock = lambda: now + timedelta(seconds=61)
    assert store.issue_state("spent:n1", timedelta(seconds=60)) is True  # it had expired
    assert store.consume_state("spent:n1") is True


def test_expired_states_are_removed_as_states_are_written(tmp_path: Path) -> None:
    """The local backend has no TTL: a serving process removes expired states itself."""
    store = LocalStore(tmp_path / "data")
    for i in range(5):
        store.issue_state(f"s-{i}", timedelta(seconds=60))
    now = store.clock()
    store.clock = lambda: now + timedelta(seconds=61)
    assert store.consume_state("s-0") is False
    rows = sqlite3.connect(tmp_path / "data" / "state.sqlite3").execute(
        "SELECT COUNT(*) FROM one_time_states"
    )
    assert rows.fetchone()[0] == 0
    store.issue_state("fresh", timedelta(seconds=60))
    assert store.consume_state("fresh") is True
    store.close()


def test_a_teams_conversations_are_listed_by_team_and_enterprise(store: Store) -> None:
    for key, status in (
        (PLAIN, Status.AWAITING_APPROVAL),
        (OTHER, Status.AWAITING_APPROVAL),
        (GRID, Status.RUNNING),
        (GRID_2, Status.INTERRUPTED),
    ):
        lease, _ = store.acquire(key, "w", status=status)
        store.release(lease)
    idle = ConversationKey(team="TA", channel="C9", thread_ts="1700000000.000900")
    lease, _ = store.acquire(idle, "w")
    store.release(lease, status=Status.IDLE)

    assert [r.key for r in store.list_by_team("TA")] == [PLAIN]  # not E1's TA, not idle
    assert [r.key for r in store.list_by_team("TA", enterprise="E1")] == [GRID]
    assert {r.key for r in store.list_by_team(None, enterprise="E1")} == {GRID, GRID_2}
    assert store.list_by_team("TA", enterprise="E1", statuses=[Status.AWAITING_APPROVAL]) == []
    assert store.list_by_team("TZ") == []
    with pytest.raises(ValueError):
        store.list_by_team(None)


def test_an_installation_is_deleted_only_if_it_is_the_one_read(store: Store) -> None:
    """An uninstall deletes the installation it was sent for, not a re-install saved since."""
    old, new = json.dumps({"installed_at": 1}), json.dumps({"installed_at": 2})
    store.save_installation("-:TA", old)
    store.save_installation("-:TA", new)  # installed again
    assert store.delete_installation("-:TA", only=old) is False
    assert store.find_installation("-:TA") == new
    assert store.delete_installation("-:TA", only=new) is True
    assert store.find_installation("-:TA") is None
    assert store.delete_installation("-:TA", only=new) is False


def test_a_removal_is_recorded_once_pending_until_finished_then_remembered(store: Store) -> None:
    now = store.clock()
    first = Removal(removal_id="Ev1", team="TA", at=now)
    org = Removal(removal_id="Ev2", enterprise="E1", at=now - timedelta(seconds=5))
    assert store.find_removal("Ev1") is None
    assert store.record_removal(first) is True
    assert store.record_removal(first) is False  # the same event told again
    assert store.record_removal(org) is True
    assert store.find_removal("Ev1") == first
    assert store.pending_removals() == [org, first]  # oldest first
    store.finish_removal("Ev2")
    store.finish_removal("Ev2")  # done already: nothing changes
    store.finish_removal("never")
    assert store.pending_removals() == [first]
    assert store.find_removal("Ev2") == org  # still a duplicate, for a while
    assert store.record_removal(org) is False
    later = now + store.event_ttl + timedelta(seconds=2)
    store.clock = lambda: later
    assert store.find_removal("Ev2") is None  # forgotten once finished for the event TTL
    assert store.record_removal(org) is True
    assert store.find_removal("Ev1") == first  # a pending one is never forgotten
    assert {r.removal_id for r in store.pending_removals()} == {"Ev1", "Ev2"}
    with pytest.raises(ValueError):
        store.record_removal(Removal(removal_id="", team="TA", at=now))
