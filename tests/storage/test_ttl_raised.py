"""A conversation whose state expired stays expired in every listing when `BOT_STATE_TTL`
is raised afterwards, on both backends. The aws listings once bounded "not expired" by the
last activity and the TTL of the reader: after a raise, threads that had expired under
the old TTL came back as `running`, and every recovery sweep took a run slot for each,
showed it "queued" in its Slack thread and failed to take it (found by the chaos soak,
whose expiry runs shorten the TTL and the next runs lengthen it again, seed 620051); the
count of running conversations (a gauge) counted them too."""

from __future__ import annotations

from datetime import timedelta

from storage import ConversationKey, Status, Store
from tests.conftest import Backend
from tests.storage.conftest import clocked, key


def left_in(store: Store, thread: ConversationKey, status: Status) -> None:
    kept = store.keep(
        thread, f"ev-{thread.thread_ts}", '{"text":"hi"}', participant="U1", owner="w"
    )
    assert kept.lease is not None
    store.release(kept.lease, status=status, run_by="U1")


def test_a_state_that_expired_under_a_shorter_ttl_is_never_listed_after_a_raise(
    backend: Backend,
) -> None:
    short = backend.open(state_ttl=timedelta(seconds=2))
    clock = clocked(short)
    running, waiting, interrupted = key(1), key(2), key(3)
    left_in(short, running, Status.RUNNING)
    left_in(short, waiting, Status.AWAITING_APPROVAL)
    left_in(short, interrupted, Status.INTERRUPTED)

    raised = backend.open(state_ttl=timedelta(hours=1))
    later = clocked(raised)
    later.now = clock.now + timedelta(seconds=30)  # the three expired under the old TTL
    assert [raised.get(k) for k in (running, waiting, interrupted)] == [None, None, None]

    alive = key(4)
    left_in(raised, alive, Status.RUNNING)  # written under the new TTL: listed
    assert [r.key for r in raised.list_by_status(Status.RUNNING, limit=10)] == [alive]
    assert raised.list_by_status(Status.AWAITING_APPROVAL, limit=10) == []
    assert raised.list_paused_in("T1", "C1", limit=10) == []
    assert raised.list_waiting_in("T1", limit=10) == []
    assert raised.list_waiting_on("T1", "U1", limit=10) == []
    assert [r.key for r in raised.list_by_team("T1", limit=10)] == [alive]
    assert raised.count_by_status()[Status.RUNNING] == 1  # `/agent-admin status`, Home

    # A message into an expired thread brings it back, listed at once (what was found
    # expired before is not remembered past the write that revived it).
    kept = raised.keep(running, "ev-again", '{"text":"hi"}', participant="U1", owner="w")
    assert kept.lease is not None
    listed = {r.key for r in raised.list_by_status(Status.RUNNING, limit=10)}
    assert listed == {running, alive}
