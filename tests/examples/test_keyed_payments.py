"""examples.keyed_payments on its offline model, through the runtime (local backend): the
approved charge reaches a keyed HTTP service (testkit's) with the call's idempotency key in
`Idempotency-Key`; a lost answer is sent again with the same key and books one payment;
without PAYMENTS_URL the offline payment book deduplicates the same way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.runtime import Answer, ApprovalRequest, ConversationRuntime, RequestContext
from examples import keyed_payments
from storage.local import LocalStore
from testkit.keyed_service import KeyedService, keyed_service
from testkit.runtime import KEY, decide

ASKED = "charge 20 EUR to Acme for the March invoice"


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> Iterator[KeyedService]:
    with keyed_service() as running:
        monkeypatch.setenv("PAYMENTS_URL", running.url)
        yield running


async def charged(store: LocalStore) -> tuple[str, list[Any]]:
    """Ask for the charge and approve it: the call's id and what the run ended with."""
    rt = ConversationRuntime(store, keyed_payments.build_agent())
    [request] = await rt.handle_message(KEY, event_id="E1", user="U1", text=ASKED)
    assert isinstance(request, ApprovalRequest)
    [call] = request.calls
    assert json.loads(call.arguments) == {
        "customer": "Acme",
        "amount": 20.0,
        "currency": "EUR",
        "description": "the March invoice",
    }
    done = await decide(rt, request, call.call_id)
    return call.call_id, done


def the_key(store: LocalStore, call_id: str) -> str:
    record = store.get(KEY)
    assert record is not None
    context = RequestContext(
        team=KEY.team,
        channel=KEY.channel,
        thread_ts=KEY.thread_ts,
        user="U1",
        generation=record.generation,
    )
    return context.idempotency_key(call_id)


async def test_an_approved_charge_goes_to_the_service_with_its_key(
    local_store: LocalStore, offline: Path, service: KeyedService
) -> None:
    call_id, done = await charged(local_store)
    assert Answer(key=KEY, text="Done: Charged 20.00 EUR to Acme: payment effect-1.") in done
    [request] = service.requests
    assert request["key"] == the_key(local_store, call_id)
    assert (request["customer"], request["amount"], request["currency"]) == ("Acme", 20.0, "EUR")


def test_a_lost_answer_is_sent_again_with_the_same_key(
    service: KeyedService, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost = [True]
    apply = service.apply

    def answer_lost_once(request: dict[str, Any]) -> dict[str, Any]:
        result = apply(request)  # applied; the answer never arrives
        if lost:
            lost.pop()
            raise ConnectionResetError("the connection dropped")
        return result

    monkeypatch.setattr(service, "apply", answer_lost_once)
    answer = keyed_payments.send_charge(service.url, "k-1", {"amount": 5})
    assert answer["id"] == "effect-1" and answer["repeated"] is True
    assert service.keys() == ["k-1", "k-1"] and len(service.effects) == 1


async def test_the_offline_payment_book_deduplicates_by_key(
    local_store: LocalStore, offline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAYMENTS_STANDIN_SECONDS", "0")
    call_id, done = await charged(local_store)
    assert Answer(key=KEY, text="Done: Charged 20.00 EUR to Acme: payment pay-1.") in done
    book = keyed_payments.payment_book()
    again = book.charge(
        the_key(local_store, call_id), {"amount": 20}
    )  # the same call, started again
    assert again["id"] == "pay-1" and again["repeated"] is True
    assert [p["key"] for p in book.payments()] == [the_key(local_store, call_id)]
    assert book.charge("another call", {"amount": 1})["id"] == "pay-2"
