"""The agent knows its conversation, through the real bolt app and the Web API stand-in: a
thread's earlier messages when mentioned mid-thread (read once, kept in the session), who
said what, shared files as model inputs stored once, the requesting user in the run context
tools get, and traces grouped per thread."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Iterator

import pytest
from agents import Agent
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.tracing import set_trace_processors, set_tracing_disabled
from agents.tracing.processors import default_processor

from bot.demo_agent import who_is_asking
from bot.runtime import retry_safe
from bot.settings import RuntimeSettings
from bot.standin.slack_api import Message
from bot.tracing import configure_tracing
from storage import Status
from storage.local import LocalStore
from testkit.runtime import content_parts, history, user_texts
from testkit.slack import CHANNEL, Harness, runtime_of, slack_bot, thread_key

ALICE, BOB = "UALICE", "UBOB"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
PDF = b"%PDF-1.4\n% a small document\n" + b"0" * 2000 + b"\n%%EOF\n"


def answering(count: int = 10) -> ScriptedModel:
    return ScriptedModel(
        [ModelStep.respond(lambda call: [assistant_message("noted")]) for _ in range(count)]
    )


@pytest.fixture
async def bot(local_store: LocalStore, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    model = getattr(request, "param", None) or answering()
    agent = Agent(name="assistant", model=model, tools=[retry_safe(who_is_asking)])
    runtime = runtime_of(local_store, agent, RuntimeSettings())
    async with slack_bot(local_store, runtime) as harness:
        harness.api.people = {ALICE: "Alice", BOB: "Bob"}
        yield harness


def model_of(bot: Harness) -> ScriptedModel:
    model = bot.runtime.agent.model
    assert isinstance(model, ScriptedModel)
    return model


async def answers(bot: Harness, thread_ts: str, count: int) -> list[Message]:
    found: list[Message] = await bot.api.wait_for(
        lambda: (
            len(r := [m for m in bot.api.bot_replies(CHANNEL, thread_ts) if _is_answer(m)]) >= count
            and r
        )
    )
    await bot.settled(thread_ts, Status.IDLE)
    return found


def _is_answer(message: Message) -> bool:
    return ((message.metadata or {}).get("event_payload") or {}).get("kind") == "Answer"


def context_reads(bot: Harness) -> int:
    """conversations.replies calls for a thread's earlier messages (the poster's own reads of
    its posts carry no `latest`)."""
    return sum(
        1
        for c in bot.api.calls
        if c.method.startswith("conversations.replies") and c.args.get("latest")
    )


async def test_a_mention_mid_thread_gives_the_earlier_messages_with_authors(
    bot: Harness,
) -> None:
    top = bot.api.add_user_message(CHANNEL, ALICE, "The build is red since Monday")
    bot.api.add_user_message(CHANNEL, BOB, "I think it's the cache <!channel>", top.ts)
    await bot.mention(ALICE, "what do you think?", thread_ts=top.ts)
    await answers(bot, top.ts, 1)

    first = model_of(bot).calls[0]
    assert user_texts(first) == [
        "Earlier messages in this Slack thread, before you were asked (oldest first):\n"
        "<@UALICE> (Alice): The build is red since Monday\n"
        "<@UBOB> (Bob): I think it's the cache <!channel>",
        "<@UALICE> (Alice): what do you think?",
    ]
    assert context_reads(bot) == 1

    # Bob goes on in the thread: his message is his, and the earlier messages come from the
    # session (read once, not again).
    await bot.reply(BOB, "and the tests?", top.ts)
    await answers(bot, top.ts, 2)
    second = user_texts(model_of(bot).calls[1])
    assert second[0].startswith("Earlier messages in this Slack thread")
    assert second[1:] == ["<@UALICE> (Alice): what do you think?", "<@UBOB> (Bob): and the tests?"]
    assert context_reads(bot) == 1
    stored = [i["content"] for i in history(bot.store, thread_key(top.ts))]
    assert sum(1 for c in stored if "Earlier messages" in str(c)) == 1
    # Each person's name was looked up once.
    assert sorted(c.args["user"] for c in bot.api.called("users.info")) == [ALICE, BOB]


async def test_after_a_restart_the_earlier_messages_come_from_the_session(
    local_store: LocalStore,
) -> None:
    model = answering()
    agent = Agent(name="assistant", model=model)
    async with slack_bot(local_store, runtime_of(local_store, agent)) as bot:
        top = bot.api.add_user_message(CHANNEL, ALICE, "Deploy is stuck")
        await bot.mention(BOB, "any idea?", thread_ts=top.ts)
        await answers(bot, top.ts, 1)
        assert context_reads(bot) == 1
    # A new process (runtime and Slack client) with the same storage.
    async with slack_bot(local_store, runtime_of(local_store, agent)) as bot:
        await bot.reply(ALICE, "still stuck", top.ts)
        await bot.settled(top.ts, Status.IDLE)
        assert context_reads(bot) == 0
    texts = user_texts(model.calls[1])
    assert texts[0].endswith("<@UALICE>: Deploy is stuck")  # no names in this stand-in
    assert texts[1:] == ["<@UBOB>: any idea?", "<@UALICE>: still stuck"]


async def test_a_name_slack_does_not_give_is_not_asked_for_every_message(bot: Harness) -> None:
    """users.info refuses someone (here: not in the stand-in's people): the header has no
    name, and the next messages do not ask again (users.info is rate limited too)."""
    stranger = "USTRANGER"
    top = await bot.mention(stranger, "hello")
    await answers(bot, top.ts, 1)
    await bot.reply(stranger, "again", top.ts)
    await answers(bot, top.ts, 2)
    assert user_texts(model_of(bot).calls[1])[-1] == "<@USTRANGER>: again"
    assert [c.args["user"] for c in bot.api.called("users.info")] == [stranger]


async def test_a_mention_at_the_top_reads_no_thread(bot: Harness) -> None:
    top = await bot.mention(BOB, "hello")
    await answers(bot, top.ts, 1)
    assert user_texts(model_of(bot).calls[0]) == ["<@UBOB> (Bob): hello"]
    assert context_reads(bot) == 0


async def test_a_thread_slack_refuses_to_read_is_said_and_answered_anyway(bot: Harness) -> None:
    top = bot.api.add_user_message(CHANNEL, ALICE, "secret plans")
    bot.api.rate_limited["conversations.replies"] = 1
    await bot.mention(BOB, "summarize please", thread_ts=top.ts)
    await answers(bot, top.ts, 1)
    assert user_texts(model_of(bot).calls[0]) == ["<@UBOB> (Bob): summarize please"]
    notes = [m.text for m in bot.api.bot_replies(CHANNEL, top.ts) if "earlier messages" in m.text]
    assert len(notes) == 1 and "limits how often" in notes[0]
    assert bot.api.called("conversations.replies:429")
    # The next message does not try again (the refused read was the only one): the
    # conversation has begun.
    await bot.reply(BOB, "thanks", top.ts)
    await answers(bot, top.ts, 2)
    assert context_reads(bot) == 1


def blob_count(store: LocalStore) -> int:
    return sum(
        1
        for path in (store.data_dir / "blobs").rglob("*")
        if path.is_file() and "files" in path.parts
    )


async def test_an_image_and_a_pdf_reach_the_model_and_are_stored_once(bot: Harness) -> None:
    image = bot.api.add_file("chart.png", "image/png", PNG)
    report = bot.api.add_file("report.pdf", "application/pdf", PDF)
    top = await bot.mention(ALICE, "what do these show?", files=[image, report])
    await answers(bot, top.ts, 1)

    parts = content_parts(model_of(bot).calls[0])
    assert [p["type"] for p in parts] == ["input_text", "input_image", "input_file"]
    assert parts[0]["text"].startswith(
        "<@UALICE> (Alice): what do these show?\n[shared PNG image chart.png"
    )
    assert parts[1]["image_url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert parts[2]["filename"] == "report.pdf"
    assert parts[2]["file_data"] == "data:application/pdf;base64," + base64.b64encode(PDF).decode()
    # Downloaded with the bot token; kept once by digest; the history holds references only.
    assert [c.args["token"] for c in bot.api.called("files.download")] == [True, True]
    store = bot.store
    assert isinstance(store, LocalStore)
    assert store.get_content(hashlib.sha256(PNG).hexdigest()) == PNG
    items = json.dumps(history(store, thread_key(top.ts)))
    assert f"stored-file:image/png:{hashlib.sha256(PNG).hexdigest()}" in items
    assert base64.b64encode(PNG).decode()[:40] not in items
    assert blob_count(store) == 2

    # The same image shared again is not stored again; both turns' requests carry it.
    again = bot.api.add_file("chart-copy.png", "image/png", PNG)
    await bot.reply(BOB, "and this one?", top.ts, files=[again])
    await answers(bot, top.ts, 2)
    images = [p for p in content_parts(model_of(bot).calls[1]) if p["type"] == "input_image"]
    assert len(images) == 2
    assert blob_count(store) == 2


async def test_a_file_the_model_cannot_read_gets_a_note(bot: Harness) -> None:
    archive = bot.api.add_file("logs.zip", "application/zip", b"PK\x03\x04" + b"x" * 100)
    top = await bot.mention(ALICE, "look at this", files=[archive])
    await answers(bot, top.ts, 1)
    text = user_texts(model_of(bot).calls[0])[0]
    assert "[shared a file that was not read: logs.zip (application/zip files are not" in text
    notes = [
        m.text
        for m in bot.api.bot_replies(CHANNEL, top.ts)
        if "file" in m.text and not _is_answer(m)
    ]
    assert (
        len(notes) == 1 and "logs.zip: application/zip files are not something I read" in notes[0]
    )
    assert not bot.api.called("files.download")


def asks_who() -> ScriptedModel:
    return ScriptedModel(
        [
            [assistant_message("hi")],
            [function_call("who_is_asking", {}, call_id="call-who")],
            [assistant_message("told")],
        ]
    )


@pytest.mark.parametrize("bot", [asks_who()], indirect=True)
async def test_a_tool_sees_the_requesting_user(bot: Harness) -> None:
    top = await bot.mention(ALICE, "hello")
    await answers(bot, top.ts, 1)
    await bot.reply(BOB, "who am I?", top.ts)  # Bob asks, in Alice's thread
    await answers(bot, top.ts, 2)
    outputs = [
        i["output"]
        for i in history(bot.store, thread_key(top.ts))
        if i.get("type") == "function_call_output"
    ]
    assert outputs == [f"You are <@{BOB}>, asking in <#{CHANNEL}> (thread {top.ts})."]


@pytest.fixture
def traces(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Tracing on, with the built-in JSON-lines exporter as the operator's choice."""
    caplog.set_level(logging.INFO, logger="bot.traces")
    set_tracing_disabled(False)
    configure_tracing(True, ["bot.tracing:json_log"])
    try:
        yield
    finally:
        set_trace_processors([default_processor()])
        set_tracing_disabled(True)  # as the tests' environment has it


async def test_traces_are_grouped_per_thread(
    local_store: LocalStore, caplog: pytest.LogCaptureFixture, traces: None
) -> None:
    agent = Agent(name="assistant", model=answering())
    runtime = runtime_of(local_store, agent, RuntimeSettings(tracing=True))
    async with slack_bot(local_store, runtime) as bot:
        one = await bot.mention(ALICE, "first thread")
        await answers(bot, one.ts, 1)
        await bot.reply(BOB, "more", one.ts)
        await answers(bot, one.ts, 2)
        two = await bot.mention(BOB, "second thread")
        await answers(bot, two.ts, 1)
    exported = [json.loads(r.getMessage()) for r in caplog.records if r.name == "bot.traces"]
    runs = [t for t in exported if t.get("object") == "trace"]
    assert [(t["group_id"], t["metadata"]["slack_user"]) for t in runs] == [
        (str(thread_key(one.ts)), ALICE),
        (str(thread_key(one.ts)), BOB),
        (str(thread_key(two.ts)), BOB),
    ]
    assert runs[0]["metadata"]["slack_channel"] == CHANNEL
    assert runs[0]["metadata"]["slack_thread_ts"] == one.ts
    assert {t["workflow_name"] for t in runs} == {"Slack thread"}
