"""A support desk: `BOT_AGENT=examples.support_desk:build_agent` (docs/agents.md).

- `triage` answers first. Its instructions are a function of the request (they greet the
  person asking), versioned for the fingerprint. It looks orders up (`order_status`,
  `retry_safe`: read-only), asks `policy`, an agent used as a tool, and hands refunds off
  to `billing` (`handoff()`).
- `billing` refunds orders: `refund` is a side effect the bot runs at most once; above
  REFUND_LIMIT a person approves it first. It records who asked and who approved, read from
  the run context (`RequestContext`), never from the model's arguments.
- `no_card_numbers`, an input guardrail, stops a request that carries a card number before
  any model sees it.

Offline (no OPENAI_API_KEY) a small model plays each agent; try `@agent where is order
1042?`, `@agent can I return an opened item?`, `@agent refund 80 EUR on order 1042, it
arrived broken` (approve it; 30 EUR needs no approval) or `@agent my card is 4111 1111 1111
1111`. Refunds go to BOT_DATA_DIR/refunds.jsonl."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunContextWrapper,
    TResponseInputItem,
    function_tool,
    handoff,
    input_guardrail,
)
from agents.tool_context import ToolContext

from bot.agent_api import RequestContext, retry_safe
from bot.demo_model import call_tool, rejected, say, tool_result, user_text
from examples.offline import offline_model

REFUND_LIMIT = 50.0  # euros; a larger refund waits for a person's approval
ORDERS = {
    "1042": "shipped on 3 March by parcel post; it should arrive by Friday",
    "1043": "being packed; it leaves the warehouse tomorrow",
    "1044": "delivered on 1 March",
}
POLICY = (
    "Unopened items can be returned within 30 days for a full refund. Opened items can be "
    "returned within 14 days when they are faulty. Refunds go back to the original payment "
    "method within 5 working days."
)

# -- triage: a lookup, an agent used as a tool, a handoff ---------------------------------


@function_tool
def order_status(order_id: str) -> str:
    """Where an order is (read-only)."""
    status = ORDERS.get(order_id.strip().lstrip("#"))
    return f"Order {order_id} is {status}." if status else f"I find no order {order_id}."


def triage_instructions(
    ctx: RunContextWrapper[RequestContext], agent: Agent[RequestContext]
) -> str:
    return (
        f"You are the support desk, talking in a Slack thread with <@{ctx.context.user}>. "
        "Look orders up with order_status, ask the policy expert about returns and refunds, "
        "and hand refund requests to billing. Be brief."
    )


# Instructions given as a function are fingerprinted by name and this version: change the
# version when the text changes, so that paused runs are not resumed under new rules.
triage_instructions.version = "1"  # type: ignore[attr-defined]

# -- billing: a side effect that needs approval above a limit ------------------------------


async def over_the_limit(
    ctx: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str
) -> bool:
    """Whether a person must approve this refund (it may be asked again on a resume: no
    side effects here)."""
    return float(arguments.get("amount", 0)) > REFUND_LIMIT


@function_tool(needs_approval=over_the_limit)
def refund(ctx: ToolContext[RequestContext], order_id: str, amount: float, reason: str) -> str:
    """Refund an order, in euros (a side effect: money leaves). Refunds above 50 EUR need a
    person's approval, which the bot asks for."""
    asked = ctx.context
    number = append_refund(
        {
            "order_id": order_id,
            "amount": amount,
            "reason": reason,
            "requested_by": asked.user,
            "approved_by": asked.approved_by(ctx.tool_call_id),  # None: no person had to
            "thread": f"{asked.team}:{asked.channel}:{asked.thread_ts}",
            "call_id": ctx.tool_call_id,
        }
    )
    return f"Refunded {amount:.2f} EUR on order {order_id} (refund {number})"


def append_refund(record: dict[str, Any]) -> int:
    """One JSON line per refund in BOT_DATA_DIR/refunds.jsonl; the refund's number."""
    path = Path(os.getenv("BOT_DATA_DIR", ".bot-data")) / "refunds.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+", encoding="utf-8") as handle:
        handle.seek(0)
        number = sum(1 for _ in handle) + 1
        handle.write(json.dumps({"refund": number, **record}, ensure_ascii=False) + "\n")
    return number


# -- the guardrail -------------------------------------------------------------------------

CARD_NUMBER = re.compile(r"(?<!\d)(?:\d[ -]?){12,18}\d(?!\d)")


def texts(given: str | list[TResponseInputItem]) -> list[str]:
    """The text of a run's input: a string, or the text parts of its messages."""
    if isinstance(given, str):
        return [given]
    found: list[str] = []
    for item in given:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, str):
            found.append(content)
        elif isinstance(content, list):
            found += [str(part.get("text", "")) for part in content if isinstance(part, dict)]
    return found


@input_guardrail(name="no_card_numbers", run_in_parallel=False)
def no_card_numbers(
    ctx: RunContextWrapper[Any], agent: Agent[Any], given: str | list[TResponseInputItem]
) -> GuardrailFunctionOutput:
    """Stops a request that carries something shaped like a card number; not in parallel
    with the model, so that no model is sent it."""
    carries = any(CARD_NUMBER.search(text) for text in texts(given))
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered=carries)


# -- the offline model's side of each agent (BOT_DEMO_MODEL=1) -----------------------------

HELP = (
    "(offline model) I am the support desk. Try `@agent where is order 1042?`, `@agent can I "
    "return an opened item?` or `@agent refund 80 EUR on order 1042, it arrived broken` "
    "(refunds above 50 EUR need approval)."
)
ORDER = re.compile(r"\border\s*#?\s*(\d{3,6})\b", re.IGNORECASE)
AMOUNT = re.compile(r"(\d+(?:[.,]\d{1,2})?)\s*(?:eur|euros?|€)", re.IGNORECASE)


def triage_says(call: Any) -> Any:
    result = tool_result(call)
    if result is not None:  # order_status's or the policy expert's answer
        return say(result[1])
    text = user_text(call)
    lowered = text.lower()
    if "refund" in lowered or "money back" in lowered:
        return call_tool("transfer_to_billing", {})
    order = ORDER.search(text)
    if order:
        return call_tool("order_status", {"order_id": order.group(1)})
    if any(word in lowered for word in ("return", "policy", "warranty", "exchange")):
        return call_tool("ask_policy", {"input": text})
    return say(HELP)


def billing_says(call: Any) -> Any:
    result = tool_result(call)
    if result is not None and result[0] == "refund":
        output = result[1]
        return say("OK, I did not refund it." if rejected(output) else f"Done: {output}.")
    text = user_text(call)  # handed over: the person's request
    order, amount = ORDER.search(text), AMOUNT.search(text)
    if order is None or amount is None:
        return say("Billing here: which order, and how much? E.g. `refund 30 EUR on order 1042`.")
    arguments = {
        "order_id": order.group(1),
        "amount": float(amount.group(1).replace(",", ".")),
        "reason": text,
    }
    return call_tool("refund", arguments)


def policy_says(call: Any) -> Any:
    return say(POLICY)


# -- the agents ------------------------------------------------------------------------------


def build_agent() -> Agent[Any]:
    billing = Agent[RequestContext](
        name="billing",
        handoff_description="Refunds and payments.",
        instructions=(
            f"You handle refunds. Refund with the refund tool (amounts in euros; above "
            f"{REFUND_LIMIT:.0f} EUR a person approves it). Ask for the order number and the "
            "amount when they are missing."
        ),
        model=offline_model(billing_says),
        tools=[refund],
    )
    policy = Agent[RequestContext](
        name="policy",
        instructions=f"You know the shop's policy and answer from it only: {POLICY}",
        model=offline_model(policy_says),
    )
    return Agent[RequestContext](
        name="triage",
        instructions=triage_instructions,
        model=offline_model(triage_says),
        tools=[
            retry_safe(order_status),
            policy.as_tool("ask_policy", "Ask the policy expert about returns and refunds."),
        ],
        handoffs=[handoff(billing)],
        input_guardrails=[no_card_numbers],
    )
