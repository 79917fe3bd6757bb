"""The OAuth flow's signed states, on both backends: a state is consumed once (a replay is
refused, also by another replica), and an expired, tampered or foreign one never. (That
issuing writes nothing is measured on a real process: `test_garbage`.)"""

from __future__ import annotations

from datetime import timedelta

from bot.slackapp.oauth_state import SPENT, SignedStates
from storage import Store
from testkit.slack import CLIENT_SECRET


def flip(text: str, at: int) -> str:
    return text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1 :]


async def test_a_state_is_good_once_on_any_replica(store: Store) -> None:
    states = SignedStates(CLIENT_SECRET, store)
    issued = [await states.async_issue() for _ in range(50)]
    assert len(set(issued)) == 50
    nonces = [state.split(".")[1] for state in issued]
    first = issued[0]
    assert await states.async_consume(first) is True
    assert await states.async_consume(first) is False  # a replayed redirect
    other_replica = SignedStates(CLIENT_SECRET, store)
    assert await other_replica.async_consume(first) is False
    assert await other_replica.async_consume(issued[1]) is True  # issued by another replica
    assert store.issue_state(SPENT + nonces[1], timedelta(seconds=5)) is False  # recorded


async def test_expired_tampered_and_foreign_states_are_refused(store: Store) -> None:
    states = SignedStates(CLIENT_SECRET, store, expiration_seconds=60)
    state = await states.async_issue()
    expiry, nonce, mac = state.split(".")
    tampered = [
        flip(state, 0),  # the expiry
        f"{int(expiry) + 3600}.{nonce}.{mac}",  # a later expiry, the old MAC
        f"{expiry}.{flip(nonce, 3)}.{mac}",
        f"{expiry}.{nonce}.{flip(mac, 5)}",
        f"{expiry}.{nonce}.",
        f"{expiry}.{nonce}",
        f"{expiry}..{mac}",
        f"-{expiry}.{nonce}.{mac}",
        "",
        "...",
        "x" * 5000,
        "\ud83d.\u00e9.x",
        await SignedStates("another app's secret", store).async_issue(),
    ]
    for bad in tampered:
        assert await states.async_consume(bad) is False, bad

    later = await states.async_issue()
    now = store.clock()
    store.clock = lambda: now + timedelta(seconds=61)
    assert await states.async_consume(later) is False  # expired
    assert await states.async_consume(state) is False
    fresh = await states.async_issue()
    assert await states.async_consume(fresh) is True
