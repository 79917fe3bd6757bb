"""`python -m bot admin migrate` gives paused conversations written before the place index
their `place_key`, once: `/resume`'s list finds them afterwards; and those awaiting approval
written before the approval index their keys there, for their run's starter (aws backend)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from bot.cli import main
from storage import ConversationKey, Status
from storage.aws import AwsStore, create_resources
from storage.aws.layout import meta_key

KEYS = {
    status: ConversationKey(team="T1", channel="C1", thread_ts=f"1700000000.00000{n}")
    for n, status in enumerate(
        (Status.INTERRUPTED, Status.AWAITING_APPROVAL, Status.IDLE, Status.SET_ASIDE)
    )
}


@pytest.fixture
def aws_store(aws_services: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsStore]:
    name = f"place-{uuid.uuid4().hex[:10]}"
    create_resources(name, name)
    for variable, value in {"BOT_STORAGE": "aws", "BOT_TABLE": name, "BOT_BUCKET": name}.items():
        monkeypatch.setenv(variable, value)
    store = AwsStore(name, name)
    yield store
    store.close()


def written_by_an_earlier_release(store: AwsStore, key: ConversationKey, status: Status) -> None:
    """A thread left in `status`, whose record has no `place_key` (as before the index)."""
    kept = store.keep(key, uuid.uuid4().hex, '{"text":"hi"}', participant="U1", owner="w")
    assert kept.lease is not None
    store.release(kept.lease, status=status)
    store.dynamodb.update_item(
        TableName=store.table, Key=meta_key(key), UpdateExpression="REMOVE place_key"
    )


def test_migrate_backfills_the_place_index_once(
    aws_store: AwsStore, capsys: pytest.CaptureFixture[str]
) -> None:
    for status, key in KEYS.items():
        written_by_an_earlier_release(aws_store, key, status)
    assert aws_store.list_paused_in("T1", "C1") == []
    assert aws_store.list_waiting_on("T1", "U1") == []  # released naming nobody

    assert main(["admin", "migrate"]) == 0
    out = capsys.readouterr().out
    assert "2 paused ones listed by channel" in out
    assert "1 awaiting approval listed for their run's starter" in out
    [waiting] = aws_store.list_waiting_on("T1", "U1")
    assert waiting.key == KEYS[Status.AWAITING_APPROVAL] and waiting.waiting_on == "U1"
    listed = aws_store.list_paused_in("T1", "C1", participant="U1")
    assert [r.key for r in listed] == [KEYS[Status.AWAITING_APPROVAL], KEYS[Status.INTERRUPTED]]
    idle = aws_store.dynamodb.get_item(TableName=aws_store.table, Key=meta_key(KEYS[Status.IDLE]))
    assert "place_key" not in idle["Item"]  # only paused records are placed

    again = aws_store.migrate()  # idempotent: nothing left to place
    assert (again.records, again.placed, again.waiting) == (len(KEYS), 0, 0)
    assert len(aws_store.list_paused_in("T1", "C1")) == 2
