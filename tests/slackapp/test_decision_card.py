"""One announcement per decision: the approval request's card itself says who decided what
(the clicked card; for a reply or a click on the Home tab, the card found by call id), and no
other message says it again. A post says it only when there is no card or Slack refuses the
edit for good; a transient failure of the edit is retried, never replaced by a post; and a
redelivery after a crash adds nothing. The real bolt app, signed requests, the recording
Web API stand-in (told to fail or hold `chat.update`), the runtime and storage behind it."""

from __future__ import annotations

import copy
import json
import signal
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from bot.settings import RuntimeSettings
from bot.slackapp.blocks import APPROVE, REJECT
from bot.standin.slack_api import Call, Message
from storage import Status
from storage.local import LocalStore
from storage.models import utcnow
from testkit.deployment import deployment, finished
from testkit.responses import ScriptedResponses, message, tool_call
from testkit.runtime import SideEffects, build_agent, email_then_answer
from testkit.slack import CHANNEL, Harness, runtime_of, slack_bot
from tests.conftest import Backend
from tests.slackapp.test_home import click, elements, open_home

ALICE, APPROVER = "UALICE", "UAPPROVER"
APPROVED = ":white_check_mark: `send_email` approved by <@UALICE>"


@pytest.fixture
async def bot(local_store: LocalStore, effects: SideEffects) -> AsyncIterator[Harness]:
    settings = RuntimeSettings(approvers=frozenset({APPROVER}))
    runtime = runtime_of(local_store, build_agent(email_then_answer(), effects), settings)
    async with slack_bot(local_store, runtime) as harness:
        yield harness


async def waiting_card(bot: Harness, text: str = "email Ana") -> tuple[Message, Message]:
    """Alice's request, and its card as her client shows it (buttons included)."""
    top = await bot.mention(ALICE, text)
    [card] = await bot.api.wait_for(lambda: bot.api.bot_replies(CHANNEL, top.ts))
    await bot.settled(top.ts, Status.AWAITING_APPROVAL)
    return top, copy.deepcopy(card)


def kind(post: Message) -> str:
    return str(((post.metadata or {}).get("event_payload") or {}).get("kind", ""))


def shown(bot: Harness, card: Message) -> Message:
    """The card as the thread shows it now."""
    return bot.api.messages[(card.channel, card.ts)]


def said(bot: Harness, top: Message) -> list[Message]:
    """The bot's messages in the thread, less previews of a streamed answer."""
    return [m for m in bot.api.bot_replies(CHANNEL, top.ts) if kind(m) != "Preview"]


def decision_posts(bot: Harness, top: Message) -> list[Message]:
    """Messages other than the card that say a decision."""
    return [
        m
        for m in bot.api.bot_replies(CHANNEL, top.ts)
        if kind(m) == "Decided" or (" by <@" in m.text and kind(m) != "ApprovalRequest")
    ]


async def done(bot: Harness, top: Message, text: str = "Done: email sent.") -> list[Message]:
    replies: list[Message] = await bot.api.wait_for(
        lambda: (r := bot.api.bot_replies(CHANNEL, top.ts)) and r[-1].text == text and r
    )
    await bot.settled(top.ts, Status.IDLE)
    return replies


def says_decided(card: Message, text: str = APPROVED) -> bool:
    return card.text == text and text in json.dumps(card.blocks) and APPROVE not in str(card.blocks)


def assert_decided_on_the_card(bot: Harness, top: Message, card: Message) -> None:
    """The card itself says the approval, and no other message in the thread does."""
    assert says_decided(shown(bot, card))
    assert decision_posts(bot, top) == []


async def test_a_click_turns_the_card_into_the_announcement(
    bot: Harness, effects: SideEffects
) -> None:
    top, card = await waiting_card(bot)
    assert await bot.click(card, APPROVE, ALICE) == 200
    replies = await done(bot, top)
    assert [r.ts for r in replies] == [card.ts, replies[1].ts]  # the card, then the answer
    assert_decided_on_the_card(bot, top, card)
    assert [c.args["ts"] for c in bot.api.called("chat.update")] == [card.ts]
    assert len(effects.calls("send_email")) == 1


async def test_a_rejection_click_says_so_on_the_card(bot: Harness, effects: SideEffects) -> None:
    top, card = await waiting_card(bot)
    assert await bot.click(card, REJECT, ALICE) == 200
    await bot.api.wait_for(lambda: APPROVE not in str(shown(bot, card).blocks))
    await bot.settled(top.ts, Status.IDLE)
    assert says_decided(shown(bot, card), ":no_entry_sign: `send_email` rejected by <@UALICE>")
    assert decision_posts(bot, top) == []
    assert effects.calls("send_email") == []


async def test_a_reply_finds_the_card_by_its_call(bot: Harness, effects: SideEffects) -> None:
    top, card = await waiting_card(bot)
    await bot.reply(ALICE, "yes", top.ts)
    await done(bot, top)
    assert_decided_on_the_card(bot, top, card)
    assert len(effects.calls("send_email")) == 1


async def test_an_approval_from_home_closes_the_thread_card(
    bot: Harness, effects: SideEffects
) -> None:
    top, card = await waiting_card(bot)
    home = await open_home(bot, APPROVER)
    await click(bot, APPROVER, home, elements(home["blocks"], APPROVE)[0])
    await done(bot, top)
    assert says_decided(
        shown(bot, card), f":white_check_mark: `send_email` approved by <@{APPROVER}>"
    )
    assert decision_posts(bot, top) == []
    assert len(effects.calls("send_email")) == 1


async def test_a_card_slack_will_not_edit_gets_one_post(bot: Harness) -> None:
    top, card = await waiting_card(bot)
    bot.api.failures["chat.update"] = ["cant_update_message"]
    assert await bot.click(card, APPROVE, ALICE) == 200
    replies = await done(bot, top)
    assert [r.text for r in replies[1:]] == [APPROVED, "Done: email sent."]
    assert kind(replies[1]) == "Decided"
    assert len(decision_posts(bot, top)) == 1
    assert bot.api.called("chat.update") == []  # refused once, not tried again


@pytest.mark.parametrize("copies", [2, 1])
async def test_a_clicked_card_gone_is_looked_for_once_more(bot: Harness, copies: int) -> None:
    """The clicked copy of the card was deleted (a second copy, removed by the read-back
    check): the decision goes onto the copy that stays; with no copy left, into a post."""
    top, first = await waiting_card(bot)
    clicked = first
    if copies == 2:
        clicked = copy.deepcopy(first)
        clicked.ts = bot.api.next_ts()
        bot.api.messages[(clicked.channel, clicked.ts)] = copy.deepcopy(clicked)
    del bot.api.messages[(clicked.channel, clicked.ts)]  # deleted after Alice saw it
    assert await bot.click(clicked, APPROVE, ALICE) == 200
    replies = await done(bot, top)
    if copies == 2:
        assert says_decided(shown(bot, first))
        assert decision_posts(bot, top) == []
        assert [c.args["ts"] for c in bot.api.called("chat.update")] == [clicked.ts, first.ts]
    else:
        assert [r.text for r in replies] == [APPROVED, "Done: email sent."]
        assert len(decision_posts(bot, top)) == 1


@pytest.mark.parametrize("failure", ["ratelimited", 500])
async def test_a_transient_edit_failure_is_retried_not_replaced_by_a_post(
    bot: Harness, local_store: LocalStore, effects: SideEffects, failure: str | int
) -> None:
    top, card = await waiting_card(bot)
    # 500s: more than slack_sdk's own two retries absorb; the runtime backs off.
    bot.api.failures["chat.update"] = [failure] * (3 if failure == 500 else 1)
    assert await bot.click(card, APPROVE, ALICE) == 200
    await bot.api.wait_for(lambda: not bot.api.failures["chat.update"])
    await bot.settled(top.ts, Status.RUNNING)  # its delivery owed, retried later
    # Nothing said it instead (the answer's preview, cut short, waits with the rest).
    assert [r.ts for r in said(bot, top)] == [card.ts]
    assert decision_posts(bot, top) == []
    assert APPROVE in str(shown(bot, card).blocks)
    later = utcnow() + timedelta(minutes=1)  # past the backoff
    local_store.clock = lambda: later
    await bot.runtime.serve(bot.key(top.ts))
    assert [r.text for r in said(bot, top)] == [APPROVED, "Done: email sent."]
    assert_decided_on_the_card(bot, top, card)
    assert len(effects.calls("send_email")) == 1


async def test_a_thread_that_cannot_be_read_is_no_thread_without_a_card(
    bot: Harness, local_store: LocalStore
) -> None:
    """A reply decides: its card is looked for in the thread, which Slack will not give
    back just then. That is a failure to retry, not a missing card: no post says it."""
    top, card = await waiting_card(bot)
    bot.api.method_errors["conversations.replies"] = "internal_error"
    await bot.reply(ALICE, "yes", top.ts)
    await bot.api.wait_for(lambda: bot.api.called("conversations.replies:internal_error"))
    await bot.settled(top.ts, Status.RUNNING)  # its delivery owed, retried later
    assert [r.ts for r in said(bot, top)] == [card.ts] and decision_posts(bot, top) == []
    bot.api.method_errors.clear()
    later = utcnow() + timedelta(minutes=1)  # past the backoff
    local_store.clock = lambda: later
    await bot.runtime.serve(bot.key(top.ts))
    assert [r.text for r in said(bot, top)] == [APPROVED, "Done: email sent."]
    assert decision_posts(bot, top) == []


def transfer_script() -> ScriptedResponses:
    return ScriptedResponses(
        [
            [tool_call("transfer", {"amount": 5, "to": "bob"}, "call-transfer")],
            [message("Transferred 5 to bob.")],
        ]
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local"], indirect=True)
@pytest.mark.parametrize("said_by", ["card", "post"])
async def test_a_redelivery_after_a_crash_announces_nothing_new(
    backend: Backend, tmp_path: Path, said_by: str
) -> None:
    """The process dies while Slack applies the announcement (the card's edit, or the post
    when the card cannot be edited): it lands, the delivery is not recorded. The next
    process delivers the decision again, finds it said, and says nothing more."""
    method = "chat.update" if said_by == "card" else "chat.postMessage"
    async with deployment(backend, tmp_path, transfer_script(), BOT_LEASE_SECONDS="2") as bot:
        await bot.start()
        question = await bot.mention(ALICE, "transfer 5 to bob")
        [card] = await bot.api.wait_for(lambda: bot.api.bot_replies(CHANNEL, question.ts))
        if said_by == "post":
            bot.api.method_errors["chat.update"] = "cant_update_message"
        release = bot.api.hold(method)
        assert await bot.click_approve(card, ALICE) == 200
        [held] = await bot.api.wait_for(lambda: bot.api.called(f"{method}:held"))
        assert "approved by" in str(held.args.get("text")), held.args
        assert await bot.signal(signal.SIGKILL) == -signal.SIGKILL
        release.set()

        def landed() -> list[Call]:
            return [c for c in bot.api.called(method) if "approved by" in str(c.args.get("text"))]

        await bot.api.wait_for(landed)  # Slack applied it, after all
        bot.api.method_errors.clear()  # the card could be edited now: it must not be
        await bot.start()
        await bot.api.wait_for(
            lambda: (
                "Transferred 5 to bob."
                in [r.text for r in bot.api.bot_replies(CHANNEL, question.ts)]
            ),
            within=40,
        )
        await finished(bot, question)
        assert len(bot.transfers()) <= 1  # killed as it started: its outcome is unknown
        replies = bot.api.bot_replies(CHANNEL, question.ts)
        said = ":white_check_mark: `transfer` approved by <@UALICE>"
        decisions = [r for r in replies if said in r.text]
        assert len(decisions) == 1, [r.text for r in replies]
        if said_by == "card":
            assert decisions[0].ts == card.ts
            edits = [c for c in bot.api.called("chat.update") if c.args["ts"] == card.ts]
            assert len(edits) == 1  # the redelivery saw the card say it
        else:
            assert kind(decisions[0]) == "Decided" and len(landed()) == 1
