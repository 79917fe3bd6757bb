"""An idempotency key is made of what the tool ledger knows its call by (issue 49): the
conversation's generation too. A thread used again after its state expired starts a new
generation with a fresh ledger, and a provider that numbers tool calls per conversation
gives its first call the id the old generation's first call had: the ledger runs it as a
new call, so the keyed service must see a new key (with the old one it answers the old
charge again, applies nothing, and the thread is told it was done). The real bolt app,
signed requests, the Web API stand-in; both backends."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from agents import Agent, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext

from bot.runtime import RequestContext, idempotent
from bot.settings import RuntimeSettings
from storage import Status, Store
from storage.models import utcnow
from testkit.runtime import last_user_text
from testkit.slack import CHANNEL, runtime_of, slack_bot

ALICE = "UALICE"


class PaymentService:
    """Applies each idempotency key once; a repeated key gets the first result."""

    def __init__(self) -> None:
        self.results: dict[str, str] = {}
        self.applied: list[str] = []
        self.keys: list[str] = []

    def charge(self, key: str, amount: int, to: str) -> str:
        self.keys.append(key)
        if key not in self.results:
            self.results[key] = f"charged {amount} to {to}"
            self.applied.append(self.results[key])
        return self.results[key]


def shop(service: PaymentService) -> Agent[Any]:
    @function_tool
    async def charge(ctx: ToolContext[RequestContext], amount: int, to: str) -> str:
        """Charge someone (keyed by the call's idempotency key)."""
        return service.charge(ctx.context.idempotency_key(ctx.tool_call_id), amount, to)

    def respond(call: Any) -> Any:
        items = call.input if isinstance(call.input, list) else []
        last = items[-1] if items else None
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            return [assistant_message(f"Done: {last.get('output')}")]
        amount, to = (5, "bob") if "bob" in last_user_text(call) else (50, "carol")
        # this provider numbers the calls of each conversation: the first is call_1
        return [function_call("charge", {"amount": amount, "to": to}, call_id="call_1")]

    model = ScriptedModel([ModelStep.respond(respond) for _ in range(4)])
    return Agent(name="shop", model=model, tools=[idempotent(charge)])


async def test_a_call_after_an_expiry_gets_a_new_key_though_its_id_repeats(store: Store) -> None:
    service = PaymentService()
    async with slack_bot(store, runtime_of(store, shop(service), RuntimeSettings())) as bot:
        top = await bot.mention(ALICE, "charge bob 5")
        await bot.api.wait_for(
            lambda: [m for m in bot.api.bot_replies(CHANNEL, top.ts) if "Done" in m.text]
        )
        await bot.settled(top.ts, Status.IDLE)
        first = bot.record(top.ts)
        later = utcnow() + timedelta(days=8)  # past the 7-day state TTL
        store.clock = lambda: later
        await bot.mention(ALICE, "now charge carol 50", thread_ts=top.ts)
        done = await bot.api.wait_for(
            lambda: (
                len(d := [m.text for m in bot.api.bot_replies(CHANNEL, top.ts) if "Done" in m.text])
                > 1
                and d
            )
        )
        await bot.settled(top.ts, Status.IDLE)
        second = bot.record(top.ts)
    assert first is not None and second is not None and second.generation != first.generation
    assert service.applied == ["charged 5 to bob", "charged 50 to carol"]
    assert len(set(service.keys)) == 2
    assert done[-1] == "Done: charged 50 to carol"
