"""Charges made exactly once: `BOT_AGENT=examples.keyed_payments:build_agent` (docs/agents.md,
"Keyed tools").

`charge` is `idempotent`: it sends the call's idempotency key
(`RequestContext.idempotency_key(call_id)`, the same on every attempt of the call) with each
request, and the payment service applies a key once, answering a repeated key with the
first result. So when the bot dies while a charge is in flight, the bot that continues the
run starts the call again with the same key (`BOT_IDEMPOTENT_ATTEMPTS` attempts in all) and
the thread is told it completed, instead of "outcome unknown". A person approves the
charge first, once.

`PAYMENTS_URL` is the service: `POST` of a JSON body (`customer`, `amount`, `currency`,
`description`) with an `Idempotency-Key` header, answered with JSON holding the payment's
`id` (Stripe's shape, simplified). Without it, an offline stand-in: a payment book in
BOT_DATA_DIR/payments.jsonl that deduplicates the same way, outlives the bot process as a
service would, and answers PAYMENTS_STANDIN_SECONDS (3) after it booked a charge, so that
**Restart bot** in that window shows the keyed restart. Offline (no OPENAI_API_KEY) try
`@agent charge 20 EUR to Acme for the March invoice`."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from agents import Agent, function_tool
from agents.tool_context import ToolContext

from bot.agent_api import RequestContext, idempotent
from bot.demo_model import call_tool, rejected, say, tool_result, user_text
from examples.offline import offline_model

REQUEST_ATTEMPTS = 3  # a request whose answer was lost is sent again, with the same key


class PaymentError(Exception):
    """The service refused the charge, or could not be reached (the SDK shows the model)."""


def send_charge(url: str, key: str, charge: dict[str, Any]) -> dict[str, Any]:
    """POST the charge with its idempotency key (blocking). A lost answer (a timeout, a
    dropped connection, a 5xx) is retried here with the same key: the service applies it
    once, and the call ends with a known outcome instead of an error the model might answer
    with a second charge, under a new call and so a new key."""
    request = urllib.request.Request(
        url,
        data=json.dumps(charge).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
    )
    for attempt in range(1, REQUEST_ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == REQUEST_ATTEMPTS:
                raise PaymentError(f"the payment service answered {exc.code}") from exc
        except (OSError, http.client.HTTPException) as exc:  # no answer, or half of one
            if attempt == REQUEST_ATTEMPTS:
                raise PaymentError(f"the payment service did not answer ({exc})") from exc
        time.sleep(0.5 * attempt)  # a moment for the service to recover
    raise AssertionError("unreachable: the last attempt returns or raises")


class PaymentBook:
    """The offline stand-in for the service: one JSON line per payment, each with the key
    it was made under; a key seen before gets the first payment back (`repeated`). Written
    and synced before it answers, so a charge it booked survives the bot being killed."""

    _lock = threading.Lock()  # one charge at a time in this process

    def __init__(self, path: Path) -> None:
        self.path = path

    def payments(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def charge(self, key: str, charge: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            booked = self.payments()
            for payment in booked:
                if payment["key"] == key:
                    return {**payment, "repeated": True}
            payment = {"id": f"pay-{len(booked) + 1}", "key": key, **charge}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(payment, ensure_ascii=False) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            return payment


def payment_book() -> PaymentBook:
    return PaymentBook(Path(os.getenv("BOT_DATA_DIR", ".bot-data")) / "payments.jsonl")


async def make_payment(key: str, charge: dict[str, Any]) -> dict[str, Any]:
    url = os.getenv("PAYMENTS_URL")
    if url:
        return await asyncio.to_thread(send_charge, url, key, charge)
    payment = await asyncio.to_thread(payment_book().charge, key, charge)
    await asyncio.sleep(float(os.getenv("PAYMENTS_STANDIN_SECONDS", "3")))
    return payment


@function_tool(needs_approval=True)
async def charge(
    ctx: ToolContext[RequestContext], customer: str, amount: float, currency: str, description: str
) -> str:
    """Charge a customer (a side effect: money moves; a person approves it first). Amount in
    the currency's units, currency as three letters (EUR, USD)."""
    key = ctx.context.idempotency_key(ctx.tool_call_id)
    request = {
        "customer": customer,
        "amount": amount,
        "currency": currency.upper(),
        "description": description,
    }
    payment = await make_payment(key, request)
    again = " (the service had it already: same key, same payment)"
    return f"Charged {amount:.2f} {currency.upper()} to {customer}: payment {payment['id']}" + (
        again if payment.get("repeated") else ""
    )


# -- the offline model (BOT_DEMO_MODEL=1) ----------------------------------------------------

HELP = (
    "(offline model) I charge customers; each charge needs your approval. Try `@agent charge "
    "20 EUR to Acme for the March invoice`, approve it, and click Restart bot while it runs: "
    "the charge is made once."
)
CHARGE = re.compile(  # charge <amount> [<currency>] [to] <customer> [for <purpose>]
    r"charge\s+(\d+(?:[.,]\d{1,2})?)\s*([A-Za-z]{3})?\s+(?:to\s+)?(.+?)"
    r"(?:\s+for\s+(.+?))?[.!?]*$",
    re.IGNORECASE,
)


def cashier_says(call: Any) -> Any:
    result = tool_result(call)
    if result is not None:
        output = result[1]
        return say("OK, I did not charge anyone." if rejected(output) else f"Done: {output}.")
    asked = CHARGE.search(user_text(call))
    if asked is None:
        return say(HELP)
    amount, currency, customer, purpose = asked.groups()
    arguments = {
        "customer": customer.strip(),
        "amount": float(amount.replace(",", ".")),
        "currency": (currency or "EUR").upper(),
        "description": (purpose or "payment").strip(),
    }
    return call_tool("charge", arguments)


def build_agent() -> Agent[Any]:
    return Agent[RequestContext](
        name="cashier",
        instructions=(
            "You charge customers when asked, with the charge tool; a person approves each "
            "charge. Say what was charged and the payment's id. Be brief."
        ),
        model=offline_model(cashier_says),
        tools=[idempotent(charge)],
    )
