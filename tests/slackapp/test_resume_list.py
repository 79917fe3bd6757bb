"""`/resume`'s list offers only what it can do, and does not stay stale: an interrupted
thread gets Resume, a thread waiting for approval a link to its request (a decision, not
`/resume`, continues it). A click on Resume is answered by replacing the list it was
clicked in, once the resumed run is done, with the list as it stands then; a click on a list
gone stale (that thread finished meanwhile) is answered the same way; and a queued resume's
notice replaces the list too, before the answer does. The real bolt app, signed requests,
the Web API stand-in and its response_url endpoint."""

from __future__ import annotations

import asyncio
from typing import Any

from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.settings import RuntimeSettings
from bot.slackapp.blocks import RESUME
from bot.standin.slack_api import Message
from storage import Status, Store
from testkit.runtime import SideEffects, build_agent, last_user_text
from testkit.slack import CHANNEL, Harness, runtime_of, slack_bot
from tests.slackapp.test_home import elements

ALICE, BOB = "UALICE", "UBOB"


def model(flaky_answers: asyncio.Event | None = None) -> ScriptedModel:
    """ "flaky" fails once (the run is interrupted), then is answered (once `flaky_answers`
    is set, when given); "email" asks to send an email, then says it is done; anything
    else is answered at once."""
    failed = False

    async def respond(call: Any) -> Any:
        nonlocal failed
        text = last_user_text(call)
        items = call.input if isinstance(call.input, list) else []
        if any(isinstance(i, dict) and i.get("name") == "send_email" for i in items):
            return [assistant_message("Done: email sent.")]
        if "email" in text:
            return [function_call("send_email", {"to": "ana", "body": "hi"}, call_id="call-email")]
        if "flaky" in text and not failed:
            failed = True
            raise RuntimeError("model service 500")  # interrupts the run
        if "long" in text and flaky_answers is not None:
            await flaky_answers.wait()
        return [assistant_message(f"answer to {text}")]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(10)])


async def listed(bot: Harness, user: str) -> Message:
    """`/resume` in the channel: its answer, as the person's client shows it."""
    _, token = await bot.command("/resume", "", user)
    [listing] = await bot.responses_for(token)
    return Message(
        channel=CHANNEL,
        ts="",
        text=listing["text"],
        user=bot.api.bot_user,
        blocks=listing["blocks"],
        ephemeral_to=user,
    )


def row(listing: dict[str, Any] | Message, thread_ts: str) -> dict[str, Any]:
    blocks = listing.blocks if isinstance(listing, Message) else listing["blocks"]
    [found] = [b for b in blocks or [] if f"|Thread {thread_ts}>" in b["text"]["text"]]
    return found


async def test_resume_only_where_it_resumes_and_the_list_clicked_is_replaced(
    local_store: Store, effects: SideEffects
) -> None:
    settings = RuntimeSettings(model_retries=0)
    make = runtime_of(local_store, build_agent(model(), effects), settings)
    async with slack_bot(local_store, make) as bot:
        flaky = await bot.mention(ALICE, "flaky question")
        await bot.settled(flaky.ts, Status.INTERRUPTED)
        mailing = await bot.mention(ALICE, "email ana")
        await bot.settled(mailing.ts, Status.AWAITING_APPROVAL)

        listing = await listed(bot, ALICE)
        [resume] = elements(listing.blocks, RESUME)
        assert resume["value"] == str(bot.key(flaky.ts))  # the interrupted thread's
        waiting = row(listing, mailing.ts)
        assert "accessory" not in waiting  # nothing to resume there: its request decides
        assert "· awaiting approval · since" in waiting["text"]["text"]
        assert "It waits for a decision: <https://" in waiting["text"]["text"]
        assert f"/p{mailing.ts.replace('.', '')}|see its request>." in waiting["text"]["text"]

        _, token = await bot.press(listing, RESUME, ALICE)
        [replaced] = await bot.responses_for(token)
        assert "answer to flaky question" in [
            m.text for m in bot.api.bot_replies(CHANNEL, flaky.ts)
        ]
        assert replaced["replace_original"] is True
        assert replaced["blocks"][0]["text"]["text"].startswith("Resumed <https://")
        assert elements(replaced["blocks"], RESUME) == []  # it finished: no longer listed
        assert "It waits for a decision" in row(replaced, mailing.ts)["text"]["text"]

        # The first list, still on Alice's screen, offers Resume on the finished thread.
        _, token = await bot.press(listing, RESUME, ALICE)
        [stale] = await bot.responses_for(token)
        assert stale["replace_original"] is True
        said = stale["blocks"][0]["text"]["text"]
        assert said.startswith("There is nothing to resume: the last run finished.")
        assert elements(stale["blocks"], RESUME) == []
    assert effects.calls() == []


async def test_a_queued_resume_replaces_the_list_then_its_answer_does(
    local_store: Store, effects: SideEffects
) -> None:
    """`BOT_MAX_RUNS=1` and Bob's run holds the only slot when Alice clicks Resume: the
    list says it is queued, then, after the run, that it resumed: two answers through the
    click's response_url (Slack takes five), in that order, each replacing the list."""
    bob_go = asyncio.Event()
    settings = RuntimeSettings(model_retries=0, max_runs=1)
    make = runtime_of(local_store, build_agent(model(bob_go), effects), settings)
    async with slack_bot(local_store, make) as bot:
        flaky = await bot.mention(ALICE, "flaky question")
        await bot.settled(flaky.ts, Status.INTERRUPTED)
        listing = await listed(bot, ALICE)
        long = await bot.mention(BOB, "long question")
        await bot.api.wait_for(lambda: bot.runtime.parts.slots.in_use == 1)

        _, token = await bot.press(listing, RESUME, ALICE)
        [queued] = await bot.responses_for(token)
        assert queued["text"].startswith("Queued: I'm busy with other conversations")
        assert queued["replace_original"] is True
        bob_go.set()
        _, resumed = await bot.responses_for(token, 2)
        assert resumed["replace_original"] is True
        assert resumed["text"].startswith("Resumed <https://")
        assert "answer to flaky question" in [
            m.text for m in bot.api.bot_replies(CHANNEL, flaky.ts)
        ]
        assert "answer to long question" in [m.text for m in bot.api.bot_replies(CHANNEL, long.ts)]
    assert elements(resumed["blocks"], RESUME) == []  # nothing is paused any more
