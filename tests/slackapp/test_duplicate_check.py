"""The second read-back after a redelivery's post (`duplicates`): which copy stays, and that
nothing but a later copy of the same outbox entry and part is ever deleted. Against the Web
API stand-in on loopback; the process-level proof is in test_survival."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.runtime import Answer, ConversationRuntime, DeliveryRef
from bot.slackapp.duplicates import DuplicateCheck, later_copies
from bot.slackapp.marks import mark
from bot.slackapp.poster import SlackPoster
from bot.slackapp.thread_readback import ThreadReadback
from bot.standin.slack_api import Message, SlackWebApi
from storage import Status
from testkit.runtime import SideEffects, build_agent, echo_model
from testkit.slack import CHANNEL, TEAM, running_api, thread_key
from tests.conftest import Backend

QUESTION_TS = f"{int(time.time())}.000000"


def answer_mark(outbox_id: str, part: int = 0) -> dict[str, Any]:
    return mark("Answer", id=outbox_id, part=part)


def listed(ts: float, metadata: dict[str, Any] | None, bot_id: str | None = "B1") -> dict[str, Any]:
    message: dict[str, Any] = {"ts": f"{ts:.6f}", "text": "x"}
    if bot_id:
        message["bot_id"] = bot_id
    if metadata:
        message["metadata"] = metadata
    return message


def test_the_earliest_copy_stays_and_only_copies_of_that_entry_and_part_go() -> None:
    messages = [
        listed(100.0, None, bot_id=None),  # the question
        listed(101.0, answer_mark("3.0")),  # the copy that stays
        listed(102.0, answer_mark("3.0", part=1)),  # the answer's next part
        listed(103.0, answer_mark("3.1")),  # another outcome
        listed(104.0, None),  # a streamed reply without a mark
        listed(105.0, answer_mark("3.0"), bot_id="BOTHER"),  # another app's
        listed(107.0, answer_mark("3.0")),  # a second copy
        listed(106.0, answer_mark("3.0")),  # a third, listed out of order
    ]
    assert later_copies(messages, "B1", "3.0", 0, since=0) == ["106.000000", "107.000000"]
    assert later_copies(messages, "B1", "3.0", 1, since=0) == []
    assert later_copies(messages, "B1", "3.1", 0, since=0) == []
    # An older conversation in the same thread may have used the same outbox id: a copy
    # from before `since` is neither deleted nor kept in place of the new one.
    assert later_copies(messages, "B1", "3.0", 0, since=101.5) == ["107.000000"]


def bot_message(api: SlackWebApi, metadata: dict[str, Any] | None, ts: str | None = None) -> str:
    message = Message(
        channel=CHANNEL,
        ts=ts or api.next_ts(),
        text="answer",
        user=api.bot_user,
        thread_ts=QUESTION_TS,
        metadata=metadata,
    )
    api.messages[(CHANNEL, message.ts)] = message
    return message.ts


async def test_a_check_deletes_the_later_copy_and_nothing_else() -> None:
    api = SlackWebApi()
    async with running_api(api) as url:
        api.messages[(CHANNEL, QUESTION_TS)] = Message(CHANNEL, QUESTION_TS, "hi?", "UALICE")
        old = bot_message(api, answer_mark("1.0"), ts=f"{time.time() - 3600:.6f}")
        first = bot_message(api, answer_mark("1.0"))
        streamed = bot_message(api, None)
        other = bot_message(api, answer_mark("1.1"))
        second = bot_message(api, answer_mark("1.0"))
        readback = ThreadReadback(AsyncWebClient(token="xoxb-t", base_url=f"{url}/api/"))
        check = DuplicateCheck(readback, delay=0.05)
        key = thread_key(QUESTION_TS)
        check.after_post(key, "1.0", 0)
        check.after_post(key, "1.1", 0)  # one read-back for both
        assert check.pending == 1
        await api.wait_for(lambda: api.called("chat.delete"), within=5)
        await check.close()
        assert check.pending == 0
        kept = [m.ts for m in api.thread(CHANNEL, QUESTION_TS)]
        assert kept == sorted([QUESTION_TS, old, first, streamed, other], key=float)
        assert [c.args["ts"] for c in api.called("chat.delete")] == [second]
        assert len(api.called("conversations.replies")) == 1


async def test_a_failing_check_is_logged_and_dropped_and_a_stop_runs_the_waiting_ones() -> None:
    """Slack refuses the read or the delete: nothing raises, nothing is deleted. A stop runs
    a check still waiting at once, and cancels one that Slack keeps waiting."""
    api = SlackWebApi()
    async with running_api(api) as url:
        api.messages[(CHANNEL, QUESTION_TS)] = Message(CHANNEL, QUESTION_TS, "hi?", "UALICE")
        bot_message(api, answer_mark("2.0"))
        bot_message(api, answer_mark("2.0"))
        readback = ThreadReadback(AsyncWebClient(token="xoxb-t", base_url=f"{url}/api/"))
        check = DuplicateCheck(readback, delay=0.01)
        key = thread_key(QUESTION_TS)
        api.failures["conversations.replies"] = ["channel_not_found"]
        check.after_post(key, "2.0", 0)
        await check.close()
        api.failures["chat.delete"] = ["message_not_found"]
        check.after_post(key, "2.0", 0)
        await check.close()
        assert check.pending == 0
        assert [c.method for c in api.calls if c.method.startswith("chat.")] == [
            "chat.delete:message_not_found"
        ]
        assert len(api.bot_replies(CHANNEL, QUESTION_TS)) == 2
        waiting = DuplicateCheck(readback, delay=60)
        waiting.after_post(key, "2.0", 0)
        await waiting.close()
        assert waiting.pending == 0 and len(api.bot_replies(CHANNEL, QUESTION_TS)) == 1
        answered = api.hold("conversations.replies")
        stuck = DuplicateCheck(readback, delay=60)
        stuck.after_post(key, "2.0", 0)
        await stuck.close(within=0.05)
        assert stuck.pending == 0  # cancelled, not left behind
        answered.set()


async def test_a_serve_that_lost_its_thread_after_posting_removes_its_late_copy(
    backend: Backend, effects: SideEffects
) -> None:
    """A's answer is still in flight when its thread is taken over: B redelivers it (the
    read-back cannot see A's post yet) and B's second look comes and goes before A's copy
    lands. A's release then finds the thread gone, so A looks again for copies of what it
    delivered, and the later copy goes (chaos seed 140008: one answer posted twice)."""
    api = SlackWebApi(team=TEAM)
    async with running_api(api) as url:
        top = api.add_user_message(CHANNEL, "UALICE", "<@UBOT> hi")
        key = thread_key(top.ts)

        def poster() -> SlackPoster:
            client = AsyncWebClient(token="xoxb-test", base_url=f"{url}/api/")
            return SlackPoster(client, recheck_after=0.2)

        poster_a, poster_b = poster(), poster()
        b = ConversationRuntime(
            backend.open(), build_agent(echo_model(), effects), on_outcome=poster_b, owner="B"
        )

        async def in_flight(outcome: Any, ref: DeliveryRef) -> None:
            if isinstance(outcome, Answer) and not ref.recheck:  # taken over meanwhile
                store = backend.open()
                record = store.get(key)
                assert record is not None and record.lease_owner
                lease, _ = store.acquire(key, "B|x", create=False, takeover_from=record.lease_owner)
                store.release(lease, status=Status.RUNNING, touch=False)
                await b.recover()  # B redelivers the answer
                await asyncio.sleep(0.6)  # and its second look found one copy
            await poster_a(outcome, ref)

        a = ConversationRuntime(
            backend.open(), build_agent(echo_model(), effects), on_outcome=in_flight, owner="A"
        )
        await a.handle_message(key, event_id="E1", user="UALICE", text="hi")
        await api.wait_for(lambda: api.called("chat.delete"), within=10)
        await poster_a.close()
        await poster_b.close()
        answers = [m for m in api.bot_replies(CHANNEL, top.ts) if m.text == "echo: hi"]
        assert len(answers) == 1
        assert len(api.called("chat.delete")) == 1
