"""A thread that came back after its state expired starts a new generation, whose checkpoint
versions start again at 1: what it posts must not be taken for what the expired generation
posted in the same thread. A redelivery (the first attempt failed: it may have landed) looks
in the thread before posting again, by the outcome's outbox id."""

from __future__ import annotations

from datetime import timedelta

from bot.settings import RuntimeSettings
from bot.standin.slack_api import Message
from storage import Status
from storage.local import LocalStore
from storage.models import utcnow
from testkit.runtime import SideEffects, build_agent, email_then_answer
from testkit.slack import CHANNEL, runtime_of, slack_bot

ALICE = "UALICE"


def notices(messages: list[Message], kind: str) -> list[Message]:
    return [
        m for m in messages if ((m.metadata or {}).get("event_payload") or {}).get("notice") == kind
    ]


async def test_the_expiry_notice_is_redelivered_though_the_old_card_has_its_id(
    local_store: LocalStore, effects: SideEffects
) -> None:
    runtime = runtime_of(local_store, build_agent(email_then_answer(), effects), RuntimeSettings())
    async with slack_bot(local_store, runtime) as bot:
        top = await bot.mention(ALICE, "email Ana")
        [card] = await bot.api.wait_for(lambda: bot.api.bot_replies(CHANNEL, top.ts))
        await bot.settled(top.ts, Status.AWAITING_APPROVAL)
        later = utcnow() + timedelta(days=8)  # past the 7-day TTL
        local_store.clock = lambda: later
        # Slack fails the notice's post: the runtime backs off, and its next attempt looks
        # whether the first landed after all.
        bot.api.failures["chat.postMessage"] = [500, 500, 500]  # slack_sdk retries twice
        await bot.reply(ALICE, "yes", top.ts)
        await bot.api.wait_for(lambda: not bot.api.failures["chat.postMessage"])
        await bot.settled(top.ts, Status.RUNNING)  # its delivery owed, retried later
        assert notices(bot.api.bot_replies(CHANNEL, top.ts), "state_expired") == []
        local_store.clock = lambda: later + timedelta(minutes=1)  # past the backoff
        await bot.runtime.serve(bot.key(top.ts))
        told = notices(bot.api.bot_replies(CHANNEL, top.ts), "state_expired")
    assert len(told) == 1 and "saved state expired" in told[0].text
    assert card.metadata is not None  # the card, with its own outbox id, is still there
    assert effects.calls() == []
