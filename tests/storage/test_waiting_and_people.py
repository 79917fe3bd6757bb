"""The approval listing and person records, against both backends: conversations awaiting
approval listed for the person their run's starter is (`list_waiting_on`) and for a whole
workspace (`list_waiting_in`), following every status change, scoped to the workspace, never
expired, bounded; a person greeted once, what they view kept newest-wins, their recent
conversations newest first, and records changed by two writers at once losing nothing."""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from storage import ConversationKey, InboxChanged, PersonKey, Status, Store
from storage.aws import AwsStore
from storage.aws.layout import WAITING_INDEX, person_key
from storage.listings import WAITING_PAGES
from storage.local import LocalStore
from storage.people import RECENT_LIMIT
from tests.conftest import Backend
from tests.storage.conftest import clocked


def key(n: int, team: str = "T1", enterprise: str | None = None) -> ConversationKey:
    return ConversationKey(
        team=team, channel=f"C{n % 3}", thread_ts=f"1700000000.{n:06d}", enterprise=enterprise
    )


def waiting(store: Store, key: ConversationKey, starter: str, *, by: str | None = None) -> None:
    """A run `starter` started, released awaiting approval (named as its starter, or as
    `by` names)."""
    kept = store.keep(key, uuid.uuid4().hex, '{"text":"hi"}', participant=starter, owner="w")
    assert kept.lease is not None
    store.release(kept.lease, status=Status.AWAITING_APPROVAL, run_by=by or starter)


def on(store: Store, user: str, team: str = "T1", **options: object) -> list[str]:
    found = store.list_waiting_on(team, user, **options)  # type: ignore[arg-type]
    return [r.key.thread_ts[-2:] for r in found]


def within(store: Store, team: str = "T1", **options: object) -> list[str]:
    found = store.list_waiting_in(team, **options)  # type: ignore[arg-type]
    return [r.key.thread_ts[-2:] for r in found]


def test_a_person_sees_what_waits_on_them_newest_first(store: Store) -> None:
    clock = clocked(store)
    for n, starter in enumerate(["U1", "U2", "U1", "U3"]):
        waiting(store, key(n), starter)
        clock.tick()
    assert on(store, "U1") == ["02", "00"]
    assert on(store, "U2") == ["01"]
    assert on(store, "U1", limit=1) == ["02"]
    assert on(store, "U4") == []
    [record] = store.list_waiting_on("T1", "U2")
    assert (record.status, record.waiting_on, record.run_by) == (
        Status.AWAITING_APPROVAL,
        "U2",
        "U2",
    )
    assert record.checkpoint is None and record.waiting_since is not None
    assert within(store) == ["03", "02", "01", "00"]
    assert within(store, limit=2) == ["03", "02"]


def test_only_that_workspace(store: Store) -> None:
    clock = clocked(store)
    waiting(store, key(1), "U1")
    for n, where in enumerate([{"team": "T2"}, {"enterprise": "E1"}, {"team": "T12"}], start=2):
        clock.tick()
        waiting(store, key(n, **where), "U1")
    assert on(store, "U1") == ["01"] and within(store) == ["01"]
    assert on(store, "U1", "T2") == ["02"]
    assert on(store, "U1", enterprise="E1") == ["03"] == within(store, enterprise="E1")
    assert on(store, "U1", "T12") == ["04"]
    # Values no key can hold list nothing.
    assert on(store, "U1", "E1:T1") == [] and within(store, "E1:T1") == []
    assert on(store, "U1#") == [] and on(store, "") == []


def test_status_changes_move_it_in_and_out(store: Store) -> None:
    clock = clocked(store)
    waiting(store, key(1), "U1")
    clock.tick()
    kept = store.keep(key(1), "Ev-reply", '{"text":"and?"}', participant="U2", owner="w")
    assert kept.lease is not None
    assert on(store, "U1") == [] == within(store)  # running again
    clock.tick()
    store.release(kept.lease, status=Status.AWAITING_APPROVAL, run_by="U1")
    assert on(store, "U1") == ["01"] and on(store, "U2") == []
    # A write that names nobody leaves it as it was; another status takes it out.
    lease, _ = store.acquire(key(1), "w2")
    store.set_status(lease, Status.AWAITING_APPROVAL)
    assert on(store, "U1") == ["01"]
    store.release(lease, status=Status.IDLE)
    assert on(store, "U1") == [] == within(store)
    lease, _ = store.acquire(key(1), "w3")
    store.set_status(lease, Status.AWAITING_APPROVAL)  # nobody named: nobody's
    assert within(store) == []
    store.set_status(lease, Status.AWAITING_APPROVAL, run_by="U3")
    assert on(store, "U3") == ["01"]
    store.drop_checkpoint(lease, status=Status.DISCARDED, release=True)
    assert on(store, "U3") == [] == within(store)
    if isinstance(store, AwsStore):  # the index itself holds nothing for the workspace
        found = store.dynamodb.query(
            TableName=store.table,
            IndexName=WAITING_INDEX,
            KeyConditionExpression="waiting_ws = :ws",
            ExpressionAttributeValues={":ws": {"S": "T1"}},
        )
        assert found["Items"] == []


def test_expired_ones_are_never_listed(store: Store) -> None:
    clock = clocked(store)
    waiting(store, key(1), "U1")
    clock.tick(store.state_ttl - timedelta(hours=1))
    waiting(store, key(2), "U1")
    assert on(store, "U1") == ["02", "01"]
    clock.tick(timedelta(hours=2))
    assert on(store, "U1") == ["02"] == within(store)


def test_a_workspace_examines_at_most_the_limit_times_the_pages(store: Store) -> None:
    clock = clocked(store)
    for n in range(2 * WAITING_PAGES + 2):
        waiting(store, key(n), f"U{n:02d}")
        clock.tick()
    # Entries are examined in the index's order (by person): with a limit of 1, the first
    # WAITING_PAGES people's, of whom the most recently waiting is listed.
    assert within(store, limit=1) == [f"{WAITING_PAGES - 1:02d}"]
    assert len(within(store, limit=2)) == 2
    everyone = within(store, limit=100)
    assert len(everyone) == 2 * WAITING_PAGES + 2
    assert everyone == sorted(everyone, reverse=True)  # the most recently waiting first


ALICE = PersonKey(team="T1", user="UALICE")


def test_a_person_is_greeted_once(store: Store) -> None:
    assert store.get_person(ALICE) is None
    assert store.mark_greeted(ALICE) is True
    assert store.mark_greeted(ALICE) is False
    assert store.mark_greeted(PersonKey(team="T2", user="UALICE")) is True  # another place
    assert store.mark_greeted(PersonKey(team="T1", user="UALICE", enterprise="E1")) is True
    person = store.get_person(ALICE)
    assert person is not None and person.greeted_at is not None
    store.unmark_greeted(ALICE)  # the greeting could not be shown
    assert store.mark_greeted(ALICE) is True


def test_what_a_person_views_is_kept_newest_wins(store: Store) -> None:
    clock = clocked(store)
    first = clock.now
    assert store.note_viewing(ALICE, '{"channel":"C1"}', first)
    clock.tick()
    assert store.note_viewing(ALICE, '{"channel":"C2"}', clock.now)
    assert not store.note_viewing(ALICE, '{"channel":"C0"}', first)  # arrived late
    person = store.get_person(ALICE)
    assert person is not None and person.viewing == '{"channel":"C2"}'
    assert person.viewing_at == clock.now and person.greeted_at is None


def test_recent_conversations_newest_first_and_bounded(store: Store) -> None:
    for n in range(RECENT_LIMIT + 2):
        store.note_conversation(ALICE, key(n))
    store.note_conversation(ALICE, key(5))  # back to an earlier one
    person = store.get_person(ALICE)
    assert person is not None
    assert [k.thread_ts[-2:] for k in person.recent[:3]] == ["05", "11", "10"]
    assert len(person.recent) == RECENT_LIMIT and len(set(person.recent)) == RECENT_LIMIT
    version = person.version
    store.note_conversation(ALICE, key(5))  # first already: nothing written
    again = store.get_person(ALICE)
    assert again is not None and again.version == version


def test_two_writers_at_once_lose_nothing(backend: Backend, store: Store) -> None:
    other = backend.open()
    errors: list[BaseException] = []

    def note(target: Store, start: int) -> None:
        try:
            for n in range(start, start + 4):
                target.note_conversation(ALICE, key(n))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=note, args=(s, n)) for s, n in ((store, 0), (other, 10))]
    for thread in threads:
        thread.start()
    store.mark_greeted(ALICE)
    for thread in threads:
        thread.join()
    assert errors == []
    person = store.get_person(ALICE)
    assert person is not None and person.greeted_at is not None
    assert {k.thread_ts[-2:] for k in person.recent} == {
        f"{n:02d}" for n in [*range(4), *range(10, 14)]
    }


def test_a_record_changed_elsewhere_is_read_again(backend: Backend, store: Store) -> None:
    """The process's copy of a person's item is stale once another writes: what it decides
    from the copy is checked against the table (a write at that version; a change that
    would write nothing, from a fresh read)."""
    other = backend.open()
    store.note_conversation(ALICE, key(1))
    other.note_conversation(ALICE, key(2))
    store.note_conversation(ALICE, key(3))
    person = store.get_person(ALICE)
    assert person is not None
    assert [k.thread_ts[-2:] for k in person.recent] == ["03", "02", "01"]
    assert store.mark_greeted(ALICE) is True
    other.unmark_greeted(ALICE)
    assert store.mark_greeted(ALICE) is True  # the copy says greeted; the table does not


def test_a_person_who_asks_again_costs_one_write(store: Store) -> None:
    if not isinstance(store, AwsStore):
        return  # local: one sqlite transaction either way
    sent: list[str] = []
    store.dynamodb.meta.events.register(
        "before-send.dynamodb", lambda event_name, **_: sent.append(event_name)
    )
    store.note_conversation(ALICE, key(1))
    assert [e.rsplit(".", 1)[1] for e in sent] == ["GetItem", "PutItem"]
    sent.clear()
    store.note_conversation(ALICE, key(2))
    assert [e.rsplit(".", 1)[1] for e in sent] == ["PutItem"]
    # A deleted item is not written back from the copy: the write finds no item at that
    # version, and the change starts from a fresh read.
    found = store.dynamodb.get_item(TableName=store.table, Key=person_key(str(ALICE)))
    store.dynamodb.delete_item(TableName=store.table, Key=person_key(str(ALICE)))
    assert "Item" in found
    store.note_conversation(ALICE, key(3))
    person = store.get_person(ALICE)
    assert person is not None and [k.thread_ts[-2:] for k in person.recent] == ["03"]


def released_with_note(store: Store, n: int, person: PersonKey = ALICE) -> None:
    """A new conversation kept, taken and released, its release noting it for `person`."""
    kept = store.keep(key(n), uuid.uuid4().hex, '{"text":"hi"}', participant="UALICE", owner="w")
    assert kept.lease is not None
    store.release(kept.lease, status=Status.IDLE, note=person)


def test_a_release_notes_the_conversation_for_its_opener(store: Store) -> None:
    released_with_note(store, 1)
    released_with_note(store, 2)
    person = store.get_person(ALICE)
    assert person is not None and [k.thread_ts[-2:] for k in person.recent] == ["02", "01"]
    record = store.get(key(2))
    assert record is not None and (record.status, record.lease_owner) == (Status.IDLE, None)


def test_a_release_refused_notes_nothing(store: Store) -> None:
    """The note lands with the release or not at all: a release that finds messages
    arrived meanwhile (`InboxChanged`) leaves the person's record as it was."""
    kept = store.keep(key(1), uuid.uuid4().hex, '{"text":"hi"}', participant="UALICE", owner="w")
    assert kept.lease is not None and kept.record is not None
    store.keep(key(1), uuid.uuid4().hex, '{"text":"more"}', participant="UALICE")
    with pytest.raises(InboxChanged):
        store.release(kept.lease, status=Status.IDLE, inbox_seen=kept.record.inbox_seq, note=ALICE)
    assert store.get_person(ALICE) is None


def test_a_noting_release_of_a_known_person_is_one_write(store: Store) -> None:
    """On aws, where this process knows the person's item, the note goes in the release's
    own transaction; where another process wrote it meanwhile, the release still lands and
    the note follows from a fresh read."""
    if not isinstance(store, AwsStore):
        return  # local: one sqlite transaction either way
    store.note_conversation(ALICE, key(0))  # read and written: known to this process
    sent: list[str] = []
    store.dynamodb.meta.events.register(
        "before-send.dynamodb", lambda event_name, **_: sent.append(event_name)
    )
    kept = store.keep(key(1), uuid.uuid4().hex, '{"text":"hi"}', participant="UALICE", owner="w")
    assert kept.lease is not None
    sent.clear()
    store.release(kept.lease, status=Status.IDLE, note=ALICE)
    assert [e.rsplit(".", 1)[1] for e in sent] == ["TransactWriteItems"]
    # Another writer moves the person's item on: the copy is stale.
    store.dynamodb.update_item(
        TableName=store.table,
        Key=person_key(str(ALICE)),
        UpdateExpression="SET version = version + :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    kept = store.keep(key(2), uuid.uuid4().hex, '{"text":"hi"}', participant="UALICE", owner="w")
    assert kept.lease is not None
    sent.clear()
    store.release(kept.lease, status=Status.IDLE, note=ALICE)
    assert [e.rsplit(".", 1)[1] for e in sent] == [
        "TransactWriteItems",  # refused for the person's item alone
        "TransactWriteItems",  # the release without the note
        "GetItem",
        "PutItem",
    ]
    record = store.get(key(2))
    assert record is not None and (record.status, record.lease_owner) == (Status.IDLE, None)
    person = store.get_person(ALICE)
    assert person is not None and [k.thread_ts[-2:] for k in person.recent] == ["02", "01", "00"]


def test_a_forgotten_person_starts_afresh(store: Store) -> None:
    clock = clocked(store)
    store.mark_greeted(ALICE)
    store.note_conversation(ALICE, key(1))
    clock.tick(timedelta(days=366))
    assert store.get_person(ALICE) is None
    assert store.mark_greeted(ALICE) is True
    person = store.get_person(ALICE)
    assert person is not None and person.recent == []


def test_a_local_database_made_before_the_listing_lists_its_waiting_ones(
    tmp_path: Path,
) -> None:
    """Opening a database without the listing's columns adds them and lists conversations
    already awaiting approval for their run's starter."""
    store = LocalStore(tmp_path)
    waiting(store, key(1), "U1")
    store.close()
    db = sqlite3.connect(tmp_path / "state.sqlite3")
    db.execute("DROP INDEX conversations_waiting")
    for column in ("waiting_ws", "waiting_user", "waiting_since"):
        db.execute(f"ALTER TABLE conversations DROP COLUMN {column}")
    [(text,)] = db.execute("SELECT record FROM conversations").fetchall()
    old = {k: v for k, v in json.loads(text).items() if not k.startswith("waiting")}
    db.execute("UPDATE conversations SET record = ?", (json.dumps(old),))
    db.commit()
    db.close()
    reopened = LocalStore(tmp_path)
    try:
        [record] = reopened.list_waiting_on("T1", "U1")
        assert record.key == key(1) and record.waiting_on == "U1"
    finally:
        reopened.close()
