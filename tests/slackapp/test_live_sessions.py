"""An agent session closed by the call that closes the answer's stream (`chat.stopStream`'s
`session_status`), against the Web API stand-in: one call fewer per answer, and a thread
that works on after its answer shows as processing again."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.runtime import Step
from bot.slackapp.live import LiveThreads
from bot.standin.slack_api import SlackWebApi
from storage import ConversationKey
from testkit.slack import CHANNEL, TEAM, running_api

ALICE = "UALICE"
ANSWER = "The moon pulls."
FINAL = {"event_type": "bot_answer", "event_payload": {"part": 0}}


@pytest.fixture
async def slack() -> AsyncIterator[tuple[SlackWebApi, LiveThreads]]:
    api = SlackWebApi(team=TEAM)
    async with running_api(api) as url:
        client = AsyncWebClient(token="xoxb-test", base_url=f"{url}/api/")
        yield api, LiveThreads(client)


async def answer(live: LiveThreads, key: ConversationKey) -> None:
    await live.text(key, ANSWER)
    closed = await live.finish_answer(
        key, ANSWER, fallback=ANSWER, blocks=[], footer=[], metadata=FINAL
    )
    assert closed


def statuses(api: SlackWebApi, key: ConversationKey) -> list[str]:
    session = api.session(key.channel, key.thread_ts)
    return [] if session is None else [status for _, status in session.statuses]


async def test_the_answers_stream_closes_the_session(
    slack: tuple[SlackWebApi, LiveThreads],
) -> None:
    api, live = slack
    top = api.add_user_message(CHANNEL, ALICE, "<@UBOT> why tides?")
    key = ConversationKey(team=TEAM, channel=CHANNEL, thread_ts=top.ts)
    await live.begin(key, ALICE)
    await answer(live, key)
    assert statuses(api, key) == ["processing", "closed"]
    await live.end(key)
    assert statuses(api, key) == ["processing", "closed"]  # nothing left to settle
    assert len(api.called("agents.sessions.setStatus")) == 1
    assert api.called("chat.stopStream")[0].args["session_status"] == "closed"


async def test_work_after_the_answer_opens_the_session_again(
    slack: tuple[SlackWebApi, LiveThreads],
) -> None:
    """As when messages held while a run waited are answered by the next run of the same
    serve: the session is processing while it works, and closed when it ends."""
    api, live = slack
    top = api.add_user_message(CHANNEL, ALICE, "<@UBOT> why tides?")
    key = ConversationKey(team=TEAM, channel=CHANNEL, thread_ts=top.ts)
    await live.begin(key, ALICE)
    await answer(live, key)
    await live.step(key, "call-lookup", "lookup", Step.RUNNING)
    assert statuses(api, key) == ["processing", "closed", "processing"]
    await live.end(key)
    assert statuses(api, key) == ["processing", "closed", "processing", "closed"]


async def test_a_stop_stream_slack_refuses_leaves_the_session_to_settle(
    slack: tuple[SlackWebApi, LiveThreads],
) -> None:
    """A stream Slack will not close as the answer is replaced by it; the session is then
    closed on its own when the work ends."""
    api, live = slack
    top = api.add_user_message(CHANNEL, ALICE, "<@UBOT> why tides?")
    key = ConversationKey(team=TEAM, channel=CHANNEL, thread_ts=top.ts)
    await live.begin(key, ALICE)
    await live.text(key, ANSWER)
    api.method_errors["chat.stopStream"] = "internal_error"
    closed = await live.finish_answer(
        key, ANSWER, fallback=ANSWER, blocks=[], footer=[], metadata=FINAL
    )
    assert closed  # replaced with the answer instead
    assert statuses(api, key) == ["processing"]
    await live.end(key)
    assert statuses(api, key) == ["processing", "closed"]
