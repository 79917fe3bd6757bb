"""The chaos soak's judgement, without processes: the classification of what the real poster
sends, the scripted model's rules, and the invariant checks on hand-made facts (each check
must fire on a violation and stay quiet on a clean run)."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from bench.chaos.agent import SECRET
from bench.chaos.classify import PostKind, approved, classify_post, is_decision
from bench.chaos.facts import (
    KEYED_ATTEMPTS,
    BotPost,
    HomeDiscardFacts,
    InFlightSample,
    RedeliveredStopFacts,
    ResumeAtCapFacts,
    RunFacts,
    SentMessage,
    StopFacts,
    ThreadFacts,
    UninstallFacts,
    UnsignedFacts,
    WorkspaceThread,
)
from bench.chaos.invariants import check
from bench.chaos.model import MARKER, CallMade, ModelServer
from bench.chaos.plan import ADMIN
from bench.chaos.shape_checks import exercised
from bench.chaos.slack import BOT_TOKEN, CLIENT_ID, CLIENT_SECRET, TEAM, SlackSide
from bot.runtime import (
    EXPIRED_STOP,
    NOT_YOURS_TO_STOP,
    STOPPED_BEFORE_IT_RAN,
    UNKNOWN_OUTCOME,
    Answer,
    ApprovalRequest,
    ClosedCalls,
    Decided,
    DeliveryRef,
    Notice,
    NoticeKind,
    Outcome,
    PendingCall,
    expiry_text,
    new_owner,
    not_taken_notice,
    nothing_to_stop,
    owner_pid,
    quote,
    stop_overtaken,
)
from bot.slackapp.clients import OneWorkspace
from bot.slackapp.home import CHANGED
from bot.slackapp.poster import SlackPoster
from bot.standin.oauth import Grant
from storage import (
    Conversation,
    ConversationKey,
    Expiry,
    Refusal,
    Status,
    ToolCallRecord,
    ToolCallStatus,
)
from testkit.services import free_port

KEY = ConversationKey(team="T0CHAOS", channel="CS1A", thread_ts="1700000000.000001")
NOW = datetime.now(UTC)


class RecordingClient:
    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.updates: list[dict[str, Any]] = []

    async def chat_postMessage(self, **kwargs: Any) -> dict[str, Any]:
        self.posts.append(kwargs)
        return {"ok": True}

    async def chat_update(self, **kwargs: Any) -> dict[str, Any]:
        self.updates.append(kwargs)
        return {"ok": True}

    async def conversations_replies(self, **kwargs: Any) -> dict[str, Any]:
        return {"ok": True, "messages": []}

    async def auth_test(self) -> dict[str, Any]:
        return {"ok": True, "bot_id": "BCHAOS"}


async def posted(outcome: Outcome, ref: str = "3.0") -> list[dict[str, Any]]:
    return (await sent(outcome, ref)).posts


async def sent(outcome: Outcome, ref: str = "3.0") -> RecordingClient:
    """What the real poster sent for `outcome`: its posts and its edits."""
    client = RecordingClient()
    clients = OneWorkspace(client)  # type: ignore[arg-type]
    await SlackPoster(clients)(outcome, DeliveryRef(id=ref))
    return client


@pytest.mark.parametrize("kind", [k for k in NoticeKind if k is not NoticeKind.QUEUED])
async def test_notices_from_the_poster(kind: NoticeKind) -> None:
    [post] = await posted(Notice(key=KEY, kind=kind, text="something happened"))
    found = classify_post(post)
    assert found.kind is PostKind.NOTICE
    same_icon = {"state_incompatible", "state_damaged"}  # one icon for both
    assert found.notice == kind.value or {found.notice, kind.value} <= same_icon


async def test_answers_requests_and_decisions_from_the_poster() -> None:
    call = PendingCall(call_id="call_x_1", tool_name="transfer", arguments='{"amount": 1}')
    request = ApprovalRequest(key=KEY, calls=[call], checkpoint_version=3, requested_by="U1")
    [asked] = await posted(request)
    found = classify_post(asked)
    assert (found.kind, found.call_ids, found.version, found.reminder) == (
        PostKind.APPROVAL_REQUEST,
        ("call_x_1",),
        3,
        False,
    )
    decided = Decided(key=KEY, call_id="c", tool_name="transfer", approved=True, user="U1")
    [decision] = await posted(decided)  # no card in the thread: a post says it
    assert classify_post(decision).kind is PostKind.DECISION
    clicked = decided.model_copy(update={"request_message": f"{KEY.channel}:1.000002"})
    done = await sent(clicked)  # the clicked card says it: nothing is posted
    assert done.posts == [] and len(done.updates) == 1
    [edit] = done.updates
    assert is_decision(edit) and approved(edit)
    assert classify_post(edit).kind is PostKind.DECISION
    rejected = await sent(clicked.model_copy(update={"approved": False, "reason": "no"}))
    assert is_decision(rejected.updates[0]) and not approved(rejected.updates[0])
    assert not is_decision(asked)  # the request itself, with its buttons
    [answer] = await posted(Answer(key=KEY, text="answer #s1t0m0 [resp 4]"))
    assert classify_post(answer).kind is PostKind.ANSWER


def test_metadata_wins_over_the_text() -> None:
    post = {
        "text": "anything at all",
        "metadata": {
            "event_type": "agent_outcome",
            "event_payload": {"outcome": "notice", "notice_kind": "run_failed", "outbox_id": 7},
        },
    }
    found = classify_post(post)
    assert (found.kind, found.notice, found.outbox_id) == (PostKind.NOTICE, "run_failed", "7")


def test_model_rules() -> None:
    model = ModelServer()
    [call] = model.decide([{"role": "user", "content": "transfer 5 to bob #s1t0m0"}])
    assert call["type"] == "function_call" and call["name"] == "transfer"
    assert call["call_id"].startswith("call_s1t0m0_")
    [again] = model.decide([{"role": "user", "content": "transfer 5 to bob #s1t0m0"}])
    assert again["call_id"] != call["call_id"]  # a fresh id on every call, like real models
    done = model.decide(
        [
            {"role": "user", "content": "transfer 5 to bob #s1t0m0"},
            call,
            {"type": "function_call_output", "call_id": call["call_id"], "output": UNKNOWN_OUTCOME},
        ]
    )
    text = done[0]["content"][0]["text"]
    assert "#s1t0m0" in text and f"{call['call_id']}=unknown" in text
    [echo] = model.decide(
        [{"role": "assistant", "content": "earlier"}, {"role": "user", "content": "hi #s1t0m1"}]
    )
    assert echo["content"][0]["text"].startswith("answer #s1t0m1 [resp ")
    context = "Earlier messages in this Slack thread, before you were asked: note fig #s1t0m0"
    [fresh] = model.decide(
        [{"role": "user", "content": context}, {"role": "user", "content": "again #s1t0m9"}]
    )
    assert fresh["content"][0]["text"].startswith("answer #s1t0m9 [resp ")  # context is context


def thread(**changes: Any) -> ThreadFacts:
    record = Conversation(
        key=KEY,
        status=Status.IDLE,
        created_at=datetime.fromtimestamp(0, UTC),  # before every post (theirs are at 0-10 s)
        updated_at=NOW,
        last_activity_at=NOW,
        expires_at=NOW + timedelta(hours=1),
    )
    facts = ThreadFacts(index=0, key=KEY, record=record)
    for name, value in changes.items():
        setattr(facts, name, value)
    return facts


def post(text: str, at: float = 10.0, **args: Any) -> BotPost:
    return BotPost(at=at, text=text, what=classify_post({"text": text, **args}))


def message(tag: str = "s1t0m0", text: str = "transfer 5 to bob") -> SentMessage:
    return SentMessage(tag=tag, thread=0, text=text, user="UBOB", sent_at=1.0, acked=True)


def tool_record(output: str) -> ToolCallRecord:
    return ToolCallRecord(
        key=KEY,
        call_id="call_s1t0m0_1",
        tool_name="transfer",
        arguments="{}",
        status=ToolCallStatus.COMPLETED,
        output=output,
        fence=1,
        started_at=NOW,
    )


def facts(
    threads: list[ThreadFacts],
    effects: int = 1,
    messages: list[SentMessage] | None = None,
    interrupting_faults: bool = True,
) -> RunFacts:
    call = CallMade("call_s1t0m0_1", "transfer", "s1t0m0", {"amount": 5, "to": "bob"}, at=2.0)
    line = {"tool": "transfer", "call_id": call.call_id}
    return RunFacts(
        threads=threads,
        messages=[message()] if messages is None else messages,
        calls={call.call_id: call},
        effects=[line] * effects,
        now=NOW,
        interrupting_faults=interrupting_faults,
    )


def session(output: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "transfer 5 to bob #s1t0m0"},
        {"type": "function_call", "call_id": "call_s1t0m0_1", "name": "transfer"},
        {"type": "function_call_output", "call_id": "call_s1t0m0_1", "output": output},
        {"role": "assistant", "content": "answer #s1t0m0 [resp 2]"},
    ]


def kinds(found: RunFacts) -> list[str]:
    return sorted(v.kind for v in check(found))


def clean(**changes: Any) -> ThreadFacts:
    values: dict[str, Any] = {
        "posts": [post("answer #s1t0m0 | call_s1t0m0_1=ran [resp 2]")],
        "items": session("ok: transferred 5 to bob"),
        "tool_records": {"call_s1t0m0_1": tool_record("ok: transferred 5 to bob")},
        "approved_clicks": {"call_s1t0m0_1"},
        "blobs": [
            "checkpoints/x/v0000000001-f1-ab.json.gz",
            "checkpoints/x/v0000000002-f2-cd.json.gz",
        ],
    }
    return thread(**(values | changes))


def test_a_clean_run_has_no_violation() -> None:
    assert kinds(facts([clean()])) == []


def test_each_check_fires() -> None:
    assert kinds(facts([clean()], effects=2)) == ["effect_duplicated"]
    assert kinds(facts([clean(approved_clicks=set())])) == ["effect_without_approval"]
    cancelled = "error: CancelledError: "
    assert kinds(
        facts(
            [
                clean(
                    posts=[post("answer #s1t0m0 | call_s1t0m0_1=failed [resp 2]")],
                    items=session(cancelled),
                    tool_records={"call_s1t0m0_1": tool_record(cancelled)},
                )
            ]
        )
    ) == ["notice_contradicts_ledger", "record_contradicts_ledger", "record_contradicts_ledger"]
    started = tool_record("").model_copy(update={"status": ToolCallStatus.STARTED, "output": None})
    unknown = clean(
        posts=[post("answer #s1t0m0 | call_s1t0m0_1=unknown [resp 2]")],
        items=session(UNKNOWN_OUTCOME),
        tool_records={"call_s1t0m0_1": started},
    )
    assert kinds(facts([unknown])) == ["unknown_outcome_unannounced"]
    approved = started.model_copy(update={"status": ToolCallStatus.APPROVED})
    never_settled = clean(
        posts=[post("answer #s1t0m0 | call_s1t0m0_1=not_run [resp 2]")],
        items=session("not run"),
        tool_records={"call_s1t0m0_1": approved},
    )
    assert "approved_never_settled" in kinds(facts([never_settled], effects=0))
    unknown.dead_channel = True  # nothing can be posted there
    assert kinds(facts([unknown])) == []
    unknown.dead_channel = False
    # A request a guardrail ended names its call of unknown outcome (aws seed 620237).
    guarded = post(
        ":shield: A check (`no_reveal`) withheld my answer to this request; what was done "
        "before it stands. Started, outcome unknown (not run again; check it): `transfer` "
        "(call call_s1t0m0_1).",
        at=5,
    )
    assert guarded.what.notice == "guardrail"
    unknown.posts.append(guarded)
    assert kinds(facts([unknown])) == []
    unknown.posts.remove(guarded)
    announced = post(":grey_question: `transfer` (call call_s1t0m0_1) ... unknown", at=5)
    unknown.posts.append(announced)
    assert kinds(facts([unknown])) == []
    # Nothing could have interrupted the call: an unknown outcome is a bug, announced or not.
    assert kinds(facts([unknown], interrupting_faults=False)) == ["unknown_outcome_uncaused"]
    unknown.discarded = True
    assert kinds(facts([unknown], interrupting_faults=False)) == []
    twice = clean()
    twice.posts.append(twice.posts[0])
    assert kinds(facts([twice])) == ["answer_posted_twice"]
    assert kinds(facts([clean(posts=[])])) == ["message_unanswered"]
    failed = post(":x: The run stopped: APIError. Nothing was lost; use /resume.", at=5)
    assert kinds(facts([clean(posts=[failed])])) == []
    regressed = ["x/v0000000001-f3-ab.json.gz", "x/v0000000002-f2-cd.json.gz"]
    assert kinds(facts([clean(blobs=regressed)])) == ["stale_fence_checkpoint"]
    orphans = ["x/v0000000001-f3-ab.json.gz", "x/v0000000002-f2-cd.json.gz"]
    orphans.append("x/v0000000001-f1-ef.json.gz")  # v1 has a blob from an older fence too
    assert kinds(facts([clean(blobs=orphans)])) == []
    running = clean()
    assert running.record is not None
    running.record = running.record.model_copy(update={"status": Status.RUNNING})
    assert kinds(facts([running])) == ["thread_left_running"]
    duplicated = clean(items=session("ok: transferred 5 to bob") * 2)
    assert "session_turn_duplicated" in kinds(facts([duplicated]))


async def test_a_post_the_bot_deleted_is_not_counted_as_shown() -> None:
    """The soak's Slack side: a second copy the bot's read-back deleted is marked, so the
    checks see what the thread ends with."""
    slack = SlackSide()
    url = await slack.start(free_port())
    try:
        client = AsyncWebClient(token="xoxb-chaos", base_url=f"{url}/api/")
        first = await client.chat_postMessage(channel="CS1A", text="one", thread_ts="1.000001")
        second = await client.chat_postMessage(channel="CS1A", text="one", thread_ts="1.000001")
        await client.chat_delete(channel="CS1A", ts=second["ts"])
    finally:
        await slack.stop()
    assert [(p.ts, p.deleted) for p in slack.posts] == [
        (first["ts"], False),
        (second["ts"], True),
    ]


async def test_a_card_edited_to_say_its_decision_counts_as_the_decision() -> None:
    """The soak's Slack side: the real poster's edit of an approval card (`chat.update`,
    recorded by the stand-in) is the decision's announcement, apart from the request it
    edits; the same edit again says nothing new, and a card closed otherwise is no
    decision."""
    call = PendingCall(call_id="call_x_1", tool_name="transfer", arguments="{}")
    request = ApprovalRequest(key=KEY, calls=[call], checkpoint_version=3, requested_by="U1")
    [asked] = await posted(request)
    slack = SlackSide()
    url = await slack.start(free_port())
    try:
        client = AsyncWebClient(token="xoxb-chaos", base_url=f"{url}/api/")
        cards = []
        for _ in range(2):
            cards.append(await client.chat_postMessage(**asked))
        decided = Decided(
            key=KEY,
            call_id="call_x_1",
            tool_name="transfer",
            approved=True,
            user="U1",
            request_message=f"{KEY.channel}:{cards[0]['ts']}",
        )
        clients = OneWorkspace(client)
        for _ in range(2):  # a redelivery that edits the card again
            await SlackPoster(clients)(decided, DeliveryRef(id="4.0"))
        closing = Notice(key=KEY, kind=NoticeKind.DISCARDED, text="gone", closes_cards=True)
        await SlackPoster(clients)(closing, DeliveryRef(id="5.0"))  # closes the second card
    finally:
        await slack.stop()
    kinds_shown = [(p.ts, classify_post(p.args).kind) for p in slack.posts]
    assert kinds_shown == [
        (cards[0]["ts"], PostKind.APPROVAL_REQUEST),
        (cards[1]["ts"], PostKind.APPROVAL_REQUEST),
        (cards[0]["ts"], PostKind.DECISION),
        (slack.posts[3].ts, PostKind.NOTICE),
    ]
    assert "`transfer` approved by <@U1>" in slack.posts[2].shown


async def notice_post(notice: Notice, at: float) -> BotPost:
    [sent] = await posted(notice, ref=f"{at}.0")
    return BotPost(at=at, text=sent["text"], what=classify_post(sent))


def burst(count: int, sent_at: float = 3.0) -> list[SentMessage]:
    return [
        SentMessage(f"s1t0m{100 + n}", 0, f"#s1t0m{100 + n} kiwi", "UBOB", sent_at, acked=True)
        for n in range(count)
    ]


async def test_messages_not_taken_are_named_or_counted() -> None:
    refused = burst(12)
    told = not_taken_notice(
        KEY, [Refusal(event_id=m.tag, user="UBOB", text=m.text, at=NOW) for m in refused]
    )
    posts = [clean().posts[0], await notice_post(told, at=5)]
    assert kinds(facts([clean(posts=posts)], messages=[message(), *refused])) == []
    # Named (10) or counted ("… and 2 more"): a thirteenth is neither.
    lost = burst(13)
    found = check(facts([clean(posts=posts)], messages=[message(), *lost]))
    assert [(v.kind, "#s1t0m112" in v.detail) for v in found] == [("message_unanswered", True)]
    # A notice comes after the messages it is about.
    early = [clean().posts[0], await notice_post(told, at=2)]
    assert "message_unanswered" in kinds(
        facts([clean(posts=early)], messages=[message(), *refused])
    )
    given = facts([clean(posts=posts)], messages=[message(), *refused])
    given.given = {"s1t0m100": 4.0}  # and yet the model was given it
    assert kinds(given) == ["not_taken_but_given"]


async def test_an_expiry_is_told_once_names_what_was_dropped_and_runs_nothing() -> None:
    gone = Expiry(status=Status.IDLE, last_activity_at=NOW, expired_at=NOW + timedelta(seconds=5))
    late = SentMessage("s1t0m200", 0, "and kiwi? #s1t0m200", "UBOB", 20.0, acked=True, late=True)
    late.acked_at = 20.2
    told = Notice(
        key=KEY,
        kind=NoticeKind.STATE_EXPIRED,
        text=expiry_text(gone, [], 1),
        closes_cards=True,
        details=[quote(late.text)],
    )

    def run(*notices: BotPost, effect_at: float = 4.0) -> RunFacts:
        found = facts([clean(posts=[clean().posts[0], *notices])], messages=[message(), late])
        found.state_ttl = 5.0
        found.effects[0]["time"] = effect_at
        return found

    assert kinds(run(await notice_post(told, at=21))) == []
    # Not told: the reply after the quiet spell is neither answered nor named.
    assert kinds(run()) == ["expiry_untold", "message_unanswered"]
    unnamed = told.model_copy(update={"details": [], "text": expiry_text(gone, [], 0)})
    assert kinds(run(await notice_post(unnamed, at=21))) == ["message_unanswered"]
    # A checkpoint older than the TTL fails closed (same kind): it explains what came before.
    closed = told.model_copy(update={"details": [], "text": "I can't safely continue from it."})
    assert kinds(run(await notice_post(closed, at=21))) == ["expiry_untold"]
    twice = [await notice_post(told, at=21), await notice_post(told, at=22)]
    assert kinds(run(*twice)) == ["expiry_told_twice"]
    # The transfer was asked (at 2.0) before the thread was told (at 21): it never runs after.
    assert kinds(run(await notice_post(told, at=21), effect_at=30.0)) == ["tool_ran_after_expiry"]
    # The run the state held had the first message: the notice says what became of it.
    unanswered = facts([clean(posts=[await notice_post(told, at=21)])], messages=[message(), late])
    unanswered.state_ttl = 5.0
    assert kinds(unanswered) == ["message_unanswered"]
    unanswered.given = {"s1t0m0": 1.5}
    assert kinds(unanswered) == []
    # A reply that came soon after the thread's last post is no sure expiry.
    soon = SentMessage("s1t0m200", 0, "and kiwi? #s1t0m200", "UBOB", 12.0, acked=True, late=True)
    found = facts([clean()], messages=[message(), soon])
    found.state_ttl = 5.0
    assert kinds(found) == ["message_unanswered"]


async def test_an_expiry_counts_what_it_does_not_quote() -> None:
    """The queue an expired state dropped is quoted in part and counted whole; a notice
    that counts fewer leaves the rest unexplained (chaos seed 160014)."""
    gone = Expiry(status=Status.IDLE, last_activity_at=NOW, expired_at=NOW + timedelta(seconds=5))
    dropped = burst(14)
    quotes = [quote(m.text) for m in dropped]

    async def told(counted: int) -> RunFacts:
        notice = Notice(
            key=KEY,
            kind=NoticeKind.STATE_EXPIRED,
            text=expiry_text(gone, [], counted),
            closes_cards=True,
            details=[*quotes[:10], f"… and {counted - 10} more"],
        )
        posts = [clean().posts[0], await notice_post(notice, at=21)]
        return facts([clean(posts=posts)], messages=[message(), *dropped])

    assert kinds(await told(14)) == []
    found = check(await told(11))  # the 160014 notice: 10 quoted, one more counted
    assert [v.kind for v in found] == ["message_unanswered"] * 3
    assert all(tag in found[i].detail for i, tag in enumerate(["m111", "m112", "m113"]))


# -- stops ----------------------------------------------------------------------------------


def stop(
    via: str = "button", user: str = "UBOB", sent_at: float = 3.0, answers: list[str] | None = None
) -> StopFacts:
    return StopFacts(0, user, via, "working", sent_at, True, sent_at + 0.1, answers or [])


async def stopped_notice(at: float, by: str = "UBOB", closed: ClosedCalls | None = None) -> BotPost:
    """The notice `stopping.stopped` posts (its wording, through the real poster)."""
    lost = f" {closed.describe()}" if closed is not None and closed.all else ""
    text = f"Stopped by <@{by}>.{lost} Send a new message to start again."
    return await notice_post(Notice(key=KEY, kind=NoticeKind.STOPPED, text=text), at)


def with_stops(thread_facts: ThreadFacts, *stops: StopFacts, effects: int = 1) -> RunFacts:
    found = facts([thread_facts], effects=effects)
    found.stops = list(stops)
    found.given = {"s1t0m0": 1.5}  # the model got the request before the stop
    return found


async def test_every_acked_stop_is_applied_or_answered() -> None:
    answer = post("answer #s1t0m0 | call_s1t0m0_1=ran [resp 2]", at=2.5)
    # Acked, and then nothing: neither a stopped notice nor a private answer.
    assert kinds(with_stops(clean(), stop())) == ["stop_unanswered"]
    assert kinds(with_stops(clean(), stop(answers=["Stopping it now."]))) == ["stop_unanswered"]
    unacked = stop()
    unacked.acked = False  # never reached the bot: nothing is owed
    assert kinds(with_stops(clean(), unacked)) == []
    # Applied: a stopped notice after it.
    notice = await stopped_notice(at=4.0)
    assert kinds(with_stops(clean(posts=[answer, notice]), stop())) == []
    early = await stopped_notice(at=2.0)  # a notice before the stop is not its answer
    assert kinds(with_stops(clean(posts=[answer, early]), stop(sent_at=3.0))) == ["stop_unanswered"]
    # Answered privately, each way the bot says it stopped nothing.
    for said in (
        nothing_to_stop(None),
        nothing_to_stop("UCAROL"),
        "Nothing is running there right now.",
        EXPIRED_STOP,
        stop_overtaken("UADMIN"),
        stop_overtaken(None),
    ):
        assert kinds(with_stops(clean(), stop(answers=["Stopping it now.", said]))) == []
    # The reply `stop` while nothing ran is a message: the model was given it.
    given = with_stops(clean(), stop(via="reply"))
    given.stops_given = [("UBOB", 0, 3.5)]
    assert kinds(given) == []
    given.stops_given = [("UBOB", 0, 2.5)]  # before it was sent: some other `stop`
    assert kinds(given) == ["stop_unanswered"]


async def test_a_stop_overtaken_by_a_discard_is_applied_by_it() -> None:
    """Chaos 180001: an admin discarded the conversation 0.3 s after a Stop was acked; the
    discard ended the run and told the thread, and no stopped notice followed."""
    discarded = await notice_post(
        Notice(key=KEY, kind=NoticeKind.DISCARDED, text="Discarded by <@UADMIN>."), at=4.0
    )
    pressed = stop(answers=["Stopping it now."])
    assert kinds(with_stops(clean(posts=[discarded]), pressed)) == []
    # Not when its run went on first: the discard came after the stop was lost.
    answer = post("answer #s1t0m0 | call_s1t0m0_1=ran [resp 2]", at=3.5)
    assert kinds(with_stops(clean(posts=[answer, discarded]), pressed)) == ["stop_unanswered"]
    # A reply `stop` after the run finished is a message (chaos aws 6): the discard after
    # it explains it, as it does any message; not when the bot answered it otherwise.
    said = stop(via="reply")
    assert kinds(with_stops(clean(posts=[answer, discarded]), said)) == []
    assert kinds(with_stops(clean(posts=[answer]), said)) == ["stop_unanswered"]
    accepted = stop(via="reply", answers=["Stopping it now."])
    assert kinds(with_stops(clean(posts=[answer, discarded]), accepted)) == ["stop_unanswered"]


async def test_nothing_of_a_stopped_run_comes_after_its_notice() -> None:
    """The run's answer, approval request or effect after the stopped notice is a
    violation, unless a message sent after the stop started another run, or the notice
    said the call's outcome was unknown."""
    notice = await stopped_notice(at=4.0)
    late_answer = post("answer #s1t0m0 | call_s1t0m0_1=ran [resp 2]", at=5.0)
    assert kinds(with_stops(clean(posts=[notice, late_answer]), stop())) == ["stopped_run_went_on"]
    found = with_stops(clean(posts=[notice, late_answer]), stop())
    later = SentMessage("s1t0m1", 0, "and kiwi? #s1t0m1", "UBOB", 4.4, acked=True)
    later.acked_at = 4.5  # a new message: its run may answer the old one's tag too
    found.messages = [message(), later]
    assert "stopped_run_went_on" not in kinds(found)
    # A message held for the stopped run (acked before the stop) is served after it, by a
    # run of its own: its approval request asks about a call made after the notice.
    held = SentMessage("s1t0m1", 0, "transfer 7 to ana #s1t0m1", "UBOB", 2.8, acked=True)
    held.acked_at = 2.9
    asked = CallMade("call_s1t0m1_2", "transfer", "s1t0m1", {}, at=4.2)
    buttons = await posted(
        ApprovalRequest(
            key=KEY,
            calls=[PendingCall(call_id=asked.call_id, tool_name="transfer", arguments="{}")],
            checkpoint_version=3,
            requested_by="UBOB",
        )
    )
    request = BotPost(at=4.3, text="Approval needed: transfer", what=classify_post(buttons[0]))
    decision = post(":white_check_mark: `transfer` approved by <@UBOB>", at=4.8)
    found = with_stops(clean(posts=[notice, request, decision]), stop())
    found.messages = [message(), held]
    found.calls[asked.call_id] = asked
    assert "stopped_run_went_on" not in kinds(found)
    asked.at = 3.5  # asked by the stopped run: its approval request came after the notice
    assert "stopped_run_went_on" in kinds(found)
    # The transfer asked before the notice took effect after it.
    effect = clean(posts=[notice])
    found = with_stops(effect, stop())
    found.effects[0]["time"] = 6.0
    assert "stopped_run_went_on" in kinds(found)
    unknown = ClosedCalls()
    unknown.add(
        {"call_id": "call_s1t0m0_1", "name": "transfer"},
        tool_record("x").model_copy(update={"status": ToolCallStatus.STARTED}),
    )
    told = with_stops(clean(posts=[await stopped_notice(at=4.0, closed=unknown)]), stop())
    told.effects[0]["time"] = 6.0  # its holder was paused: the notice said "unknown"
    assert "stopped_run_went_on" not in kinds(told)


async def test_a_refused_stop_stops_nothing_and_never_reaches_the_model() -> None:
    notice = await stopped_notice(at=4.0, by="UMALLORY")
    stranger = stop(user="UMALLORY")
    assert "refused_stop_honoured" in kinds(with_stops(clean(posts=[notice]), stranger))
    refused = stop(via="reply", user="UALICE", answers=[f"{NOT_YOURS_TO_STOP} Not passed on."])
    assert kinds(with_stops(clean(), refused)) == []  # answered: refused
    honoured = with_stops(clean(posts=[await stopped_notice(at=4.0, by="UALICE")]), refused)
    assert kinds(honoured) == ["refused_stop_honoured"]
    given = with_stops(clean(), refused)
    given.stops_given = [("UALICE", 0, 3.5)]
    assert kinds(given) == ["refused_stop_honoured"]


# -- notices and the ledger -----------------------------------------------------------------


async def test_stopped_and_late_notices_agree_with_the_ledger() -> None:
    cancelled = tool_record(STOPPED_BEFORE_IT_RAN).model_copy(
        update={"status": ToolCallStatus.CANCELLED}
    )
    # The ledger says the call was stopped before it ran; the effect ledger says it ran.
    closed = ClosedCalls()
    closed.add({"call_id": "call_s1t0m0_1", "name": "transfer"}, cancelled)
    notice = await stopped_notice(at=4.0, closed=closed)
    assert "Stopped before it ran" in notice.text
    ran = clean(
        posts=[notice],
        items=session(STOPPED_BEFORE_IT_RAN),
        tool_records={"call_s1t0m0_1": cancelled},
    )
    assert kinds(with_stops(ran, stop())) == [
        "notice_contradicts_ledger",
        "record_contradicts_ledger",
        "record_contradicts_ledger",
    ]
    assert kinds(with_stops(ran, stop(), effects=0)) == []
    # A late result's notice says what the tool returned.
    late = Notice(
        key=KEY,
        kind=NoticeKind.TOOL_FINISHED_LATE,
        text="`transfer` (call call_s1t0m0_1) finished after this conversation's saved "
        "state was set aside, and its result was recorded; the conversation was not "
        "continued. Its result:",
        details=["ok: transferred 5 to bob"],
    )
    told = clean(posts=[clean().posts[0], await notice_post(late, at=6.0)])
    assert kinds(facts([told])) == []
    assert kinds(facts([told], effects=0)) == [
        "notice_contradicts_ledger",
        "notice_contradicts_ledger",
        "record_contradicts_ledger",
        "record_contradicts_ledger",
    ]
    # "Outcome unknown" is said only of a call that started.
    unknown = Notice(
        key=KEY,
        kind=NoticeKind.TOOL_OUTCOME_UNKNOWN,
        text="`transfer` (call call_s1t0m0_1) was started before a restart and its outcome "
        "is unknown. It was not run again.",
    )
    said = clean(posts=[clean().posts[0], await notice_post(unknown, at=6.0)])
    said.tool_records = {"call_s1t0m0_1": cancelled}
    assert "notice_contradicts_ledger" in kinds(facts([said], effects=0))
    # Unless the thread was told afterwards that the call never ran (a stop kept it from
    # starting after a discard read it as started: `stopping._tell_cancelled_late`).
    settled = Notice(
        key=KEY,
        kind=NoticeKind.TOOL_FINISHED_LATE,
        text="`transfer` (call call_s1t0m0_1) was settled after this conversation's saved "
        "state was set aside: the run was stopped before the call started, so it never ran.",
    )
    told_unknown = clean(
        posts=[await notice_post(unknown, at=6.0)],
        items=session(STOPPED_BEFORE_IT_RAN),
        tool_records={"call_s1t0m0_1": cancelled},
    )
    assert kinds(facts([told_unknown], effects=0, messages=[])) == ["notice_contradicts_ledger"]
    told_unknown.posts.append(await notice_post(settled, at=7.0))
    assert kinds(facts([told_unknown], effects=0, messages=[])) == []
    # A discard said it of a state that expired since (untold: it was discarded), and a new
    # message made a new record with a ledger of its own (aws seed 620282, an expiry run).
    told_unknown.posts.pop()
    told_unknown.tool_records = {}
    assert kinds(facts([told_unknown], effects=0, messages=[])) == ["notice_contradicts_ledger"]
    assert told_unknown.record is not None
    made_later = datetime.fromtimestamp(6.5, UTC)
    told_unknown.record = told_unknown.record.model_copy(update={"created_at": made_later})
    assert kinds(facts([told_unknown], effects=0, messages=[])) == []


# -- keyed calls ----------------------------------------------------------------------------


def keyed(*lines: tuple[str, str, bool], fate: str = "ran", attempts: int = 1) -> RunFacts:
    """A thread whose `charge` call's run finished (the answer gives the call's fate), and
    the keyed service's requests: (key, call id, repeated)."""
    call = CallMade("call_s1t0m0_1", "charge", "s1t0m0", {"amount": 5}, at=2.0)
    record = tool_record("ok: charged 5: effect-1").model_copy(
        update={"tool_name": "charge", "attempts": attempts}
    )
    output = "ok: charged 5: effect-1" if fate == "ran" else UNKNOWN_OUTCOME
    facts = RunFacts(
        threads=[
            thread(
                posts=[post(f"answer #s1t0m0 | call_s1t0m0_1={fate} [resp 2]")],
                items=session(output),
                tool_records={"call_s1t0m0_1": record},
            )
        ],
        messages=[message(text="charge 5")],
        calls={call.call_id: call},
        effects=[
            {"tool": "charge", "call_id": call_id, "time": 3.0, "key": key}
            for key, call_id, repeated in lines
            if not repeated
        ],
        now=NOW,
        keyed=[
            {"key": key, "call_id": call_id, "at": 3.0, "repeated": repeated}
            for key, call_id, repeated in lines
        ],
    )
    if fate == "unknown":  # and the thread was told
        facts.threads[0].posts.append(
            post(":grey_question: `charge` (call call_s1t0m0_1) ... unknown", at=5)
        )
    return facts


def test_a_keyed_call_whose_run_finished_took_effect_once() -> None:
    run_again = [("k1", "call_s1t0m0_1", False), ("k1", "call_s1t0m0_1", True)]
    assert kinds(keyed(*run_again)) == []  # cut short, run again with its key: once
    # Its run says it ran; the service never applied it.
    assert kinds(keyed())[:2] == ["keyed_not_applied_once", "notice_contradicts_ledger"]
    # Two keys for one call: the service applied it twice.
    twice = keyed(("k1", "call_s1t0m0_1", False), ("k2", "call_s1t0m0_1", False))
    assert kinds(twice) == ["effect_duplicated", "keyed_not_applied_once"]
    # "Outcome unknown" of a call the service applied, its attempts not spent.
    assert kinds(keyed(*run_again, fate="unknown")) == ["keyed_outcome_unknown"]
    assert kinds(keyed(*run_again, fate="unknown", attempts=KEYED_ATTEMPTS)) == []
    # One key sent for two calls: the second call's effect was silently dropped.
    shared = keyed(*run_again, ("k1", "call_s1t1m0_2", True))
    shared.calls["call_s1t1m0_2"] = CallMade("call_s1t1m0_2", "charge", "s1t1m0", {}, 2.5)
    assert kinds(shared) == ["keyed_key_shared"]


async def test_a_guardrail_trip_reads_as_its_notice_not_a_failure() -> None:
    """A request the guardrail stops is explained by the guardrail's notice; told as a
    failure where nothing could fail a run, it is a violation."""
    asked = [message(text=f"{SECRET} kiwi5")]
    tripped = Notice(key=KEY, kind=NoticeKind.GUARDRAIL, text="A check stopped this request.")
    told = thread(posts=[await notice_post(tripped, at=5)])
    assert kinds(RunFacts([told], asked, {}, [], NOW, False, False)) == []
    failed = Notice(key=KEY, kind=NoticeKind.RUN_FAILED, text="The run stopped. Use /resume.")
    as_failure = thread(posts=[await notice_post(failed, at=5)])
    assert kinds(RunFacts([as_failure], asked, {}, [], NOW, False, False)) == [
        "guardrail_read_as_failure"
    ]
    # A model fault could fail the run that held it: the failure notice explains it.
    assert kinds(RunFacts([as_failure], asked, {}, [], NOW, interrupting_faults=False)) == []
    assert kinds(RunFacts([thread(posts=[])], asked, {}, [], NOW, False, False)) == [
        "message_unanswered"
    ]


async def test_a_guardrail_notice_explains_the_messages_its_turn_took() -> None:
    """A tripped turn takes every message waiting: the guardrail's notice explains those
    before it that no answer quotes (as a failure notice does), not those after it."""
    batched = message("s1t0m1", "and kiwi?")
    tripped = Notice(key=KEY, kind=NoticeKind.GUARDRAIL, text="A check stopped this request.")
    told = thread(posts=[await notice_post(tripped, at=5)])
    assert kinds(RunFacts([told], [message(text=f"{SECRET} x"), batched], {}, [], NOW)) == []
    batched.sent_at = 6.0
    assert kinds(RunFacts([told], [batched], {}, [], NOW)) == ["message_unanswered"]


def test_an_outage_past_the_ttl_leaves_an_expired_state_unanswered() -> None:
    """In an expiry run where no replica served for about the TTL, a thread whose state
    expired is not held to answer what it had (nobody acted there after to be told)."""
    gone = thread(record=None)
    gone.tombstone = thread().record
    found = RunFacts([gone], [message()], {}, [], NOW, state_ttl=5.0, longest_outage=1.0)
    assert kinds(found) == ["message_unanswered"]
    found.longest_outage = 4.0
    assert kinds(found) == []
    found.state_ttl = None  # not an expiry run: a state cannot expire, the check stands
    assert kinds(found) == ["message_unanswered"]
    # A stop acked just before such an outage is held to no more (chaos seed 140020 aws).
    stopped = with_stops(gone, stop(answers=["Stopping it now."]))
    stopped.state_ttl, stopped.longest_outage = 5.0, 1.0
    assert "stop_unanswered" in kinds(stopped)
    stopped.longest_outage = 4.0
    assert "stop_unanswered" not in kinds(stopped)


async def test_a_stop_names_the_messages_held_for_its_run() -> None:
    """Messages that came for the run before it stopped (after the stop was sent, too) are
    dropped with it: its notice names them and counts them all; one it neither names nor
    counts is unanswered."""
    held = [
        SentMessage(f"s1t0m{100 + n}", 0, f"#s1t0m{100 + n} kiwi", "UBOB", 3.2, acked=True)
        for n in range(3)
    ]
    for sent in held:
        sent.acked_at = 3.3  # after the stop was sent (3.0)
    text = "Stopped by <@UBOB>. Send a new message to start again."
    text += " 2 messages sent for this run were not answered:"
    named = Notice(
        key=KEY,
        kind=NoticeKind.STOPPED,
        text=text,
        details=[quote(held[0].text), quote(held[1].text)],
    )
    answer = post("answer #s1t0m0 | call_s1t0m0_1=ran [resp 2]", at=2.5)
    found = with_stops(clean(posts=[answer, await notice_post(named, at=4.0)]), stop(sent_at=3.0))
    found.messages = [message(), *held[:2]]
    assert kinds(found) == []
    found.messages = [message(), *held]  # the third: neither named nor counted
    assert kinds(found) == ["message_unanswered"]


def test_a_stop_word_given_alone_is_placed_by_the_thread_context() -> None:
    """A fresh conversation's `stop` (its state expired) comes with the thread's earlier
    messages only: their tags tell which thread it was said in; they are not given."""
    model = ModelServer()
    context = "Earlier messages in this Slack thread, before you were asked:\n<@UBOB>: hi #s1t2m0"
    model.note_given(
        [{"role": "user", "content": context}, {"role": "user", "content": "<@UBOB>: stop"}], 5.0
    )
    assert model.stops_given == [("UBOB", frozenset({"s1t2"}), 5.0)]
    assert model.given == {}


async def test_a_stream_closed_then_replaced_is_one_post() -> None:
    """The soak's Slack side: a streamed answer closed with its outcome and then replaced
    (chat.update, same ts) is one message of the thread, shown as it ends."""
    slack = SlackSide()
    url = await slack.start(free_port())
    metadata = {"event_type": "agent_outcome", "event_payload": {"kind": "Answer", "id": "o/0"}}
    try:
        client = AsyncWebClient(token="xoxb-chaos", base_url=f"{url}/api/")
        started = await client.chat_startStream(
            channel="CS1A",
            thread_ts="1.000001",
            recipient_team_id="T0CHAOS",
            recipient_user_id="UBOB",
        )
        await client.chat_appendStream(channel="CS1A", ts=started["ts"], markdown_text="answer")
        await client.chat_stopStream(channel="CS1A", ts=started["ts"], metadata=metadata)
        await client.chat_update(
            channel="CS1A", ts=started["ts"], text="answer #s1t0m0", metadata=metadata
        )
    finally:
        await slack.stop()
    assert [p.ts for p in slack.posts] == [started["ts"]]
    assert "answer #s1t0m0" in slack.posts[0].shown


def test_the_fault_targets_read_the_holders_pid() -> None:
    """A fault aimed mid-tool or mid-keyed-call finds the replica by the pid its lease
    owner names (the bot's own owner format)."""
    assert owner_pid(new_owner()) == os.getpid()
    assert owner_pid("") is None
    assert owner_pid("host|boot|pid|ticks|suffix") is None


async def test_a_message_the_stopped_run_had_is_explained_by_its_notice() -> None:
    """A message acked after the stop was sent, but given to the run the stop then ended,
    is told by the stopped notice (what became of its calls)."""
    later = SentMessage("s1t0m1", 0, "charge 12 #s1t0m1", "UBOB", 3.2, acked=True)
    later.acked_at = 3.3
    found = with_stops(clean(posts=[await stopped_notice(at=4.0)]), stop(sent_at=3.0))
    found.messages = [message(), later]
    assert kinds(found) == ["message_unanswered"]  # the model never had it
    found.given["s1t0m1"] = 3.5
    assert kinds(found) == []
    # The stop's ack came too late (its replica was frozen), yet it was kept and applied
    # (chaos 190175): it explains the notice all the same.
    late = stop(sent_at=3.0)
    late.acked = False
    unacked = with_stops(clean(posts=[await stopped_notice(at=4.0)]), late)
    unacked.messages = [message(), later]
    unacked.given["s1t0m1"] = 3.5
    assert kinds(unacked) == []


# -- issue 49's shapes ------------------------------------------------------------------------


def shape_kinds(found: RunFacts, prefix: str) -> list[str]:
    return [kind for kind in kinds(found) if kind.startswith(prefix)]


def redelivered(via: str = "button", answered: tuple[str, ...] = ()) -> RedeliveredStopFacts:
    """The admin's stop (sent at 3.0, acked at 3.1), sent again at 6.0."""
    return RedeliveredStopFacts(
        0,
        via,
        "working",
        "next_run",
        3.0,
        True,
        3.1,
        resent=[{"at": 6.0, "status": 200}],
        answered_before=list(answered),
    )


async def test_a_stop_slack_sends_again_never_stops_a_later_run() -> None:
    """The admin's stop stopped the run it was for; sent again while the thread's next run
    worked, it must not stop that one (nor any run begun after the stop was acked)."""
    answer = post("answer #s1t0m0 | call_s1t0m0_1=ran [resp 2]", at=2.5)
    first = await stopped_notice(at=4.0, by=ADMIN)
    found = with_stops(clean(posts=[first]), stop(user=ADMIN))
    found.redelivered_stops = [redelivered()]
    assert kinds(found) == []
    later = SentMessage("s1t0m1", 0, "and kiwi? #s1t0m1", "UBOB", 6.5, acked=True)
    later.acked_at = 6.6
    twice = with_stops(clean(posts=[first, await stopped_notice(8.0, by=ADMIN)]), stop(ADMIN))
    twice.messages = [message(), later]
    twice.given["s1t0m1"] = 6.7
    twice.redelivered_stops = [redelivered()]
    assert shape_kinds(twice, "redelivered") == ["redelivered_stop_applied"] * 2
    # Its first delivery stopped nothing (the run had finished): the next one is not its.
    missed = with_stops(
        clean(posts=[answer, await stopped_notice(8.0, by=ADMIN)]),
        stop(user=ADMIN, answers=[nothing_to_stop(None)]),
    )
    missed.messages = [message(), later]
    missed.given["s1t0m1"] = 6.7
    missed.redelivered_stops = [redelivered()]
    assert shape_kinds(missed, "redelivered") == ["redelivered_stop_applied"]


async def test_a_stop_slack_sends_again_never_reaches_the_model() -> None:
    """A reply `stop` that was a message (nothing ran) reaches the model once; one taken as
    a stop (a stopped notice, a private answer) never; a click or Slack's stop never."""
    given = with_stops(clean(), stop(user=ADMIN, via="reply"))
    given.redelivered_stops = [redelivered("reply")]
    given.stops_given = [(ADMIN, 0, 3.5)]
    assert kinds(given) == []
    given.stops_given = [(ADMIN, 0, 3.5), (ADMIN, 0, 3.5)]  # twice in one request
    assert shape_kinds(given, "redelivered") == ["redelivered_stop_given"]
    kept_twice = with_stops(
        clean(items=[{"role": "user", "content": f"<@{ADMIN}>: stop"}] * 2),
        stop(user=ADMIN, via="reply"),
    )
    kept_twice.redelivered_stops = [redelivered("reply")]
    assert shape_kinds(kept_twice, "redelivered") == ["redelivered_stop_given"]
    taken = with_stops(
        clean(posts=[await stopped_notice(4.0, by=ADMIN)]), stop(user=ADMIN, via="reply")
    )
    taken.redelivered_stops = [redelivered("reply")]
    assert kinds(taken) == []
    taken.stops_given = [(ADMIN, 0, 6.5)]  # the redelivery, kept as a message
    assert shape_kinds(taken, "redelivered") == ["redelivered_stop_given"]
    answered = with_stops(clean(), stop(user=ADMIN, via="reply", answers=["x"]))
    answered.redelivered_stops = [redelivered("reply", answered=("It had already finished",))]
    answered.stops_given = [(ADMIN, 0, 6.5)]
    assert shape_kinds(answered, "redelivered") == ["redelivered_stop_given"]
    session = with_stops(clean(), stop(user=ADMIN, via="session"))
    session.redelivered_stops = [redelivered("session")]
    assert kinds(session) == []  # Slack's stop while nothing runs: no answer is owed
    session.stops_given = [(ADMIN, 0, 6.5)]
    assert shape_kinds(session, "redelivered") == ["redelivered_stop_given"]


def workspace_record(thread_ts: str, status: Status) -> tuple[ConversationKey, Conversation]:
    key = ConversationKey(team="TW1", channel="CW1", thread_ts=thread_ts)
    record = thread().record
    assert record is not None
    return key, record.model_copy(update={"key": key, "status": status})


def removal(**changes: Any) -> RunFacts:
    """The second workspace removed the app (acked at 2.0), installed it again (3.0-3.5),
    and Slack sent the removal once more; a conversation begun before (discarded) and one
    begun after (still waiting for approval)."""
    before_key, before = workspace_record("1.000001", Status.DISCARDED)
    after_key, after = workspace_record("4.000001", Status.AWAITING_APPROVAL)
    values: dict[str, Any] = {
        "team": "TW1",
        "kind": "app_uninstalled",
        "event_id": "EvREMOVED",
        "acked_at": 2.0,
        "resent": [{"at": 2.5, "status": 200}, {"at": 5.0, "status": 200}],
        "reinstall_began": 3.0,
        "reinstalled_at": 3.5,
        "before": WorkspaceThread(before_key, 1.0, before),
        "after": WorkspaceThread(after_key, 4.0, after),
        "installed": True,
        "removal_recorded": True,
        "removal_finished": True,
    }
    return RunFacts([], [], {}, [], NOW, uninstall=UninstallFacts(**(values | changes)))


def test_an_uninstall_applies_once_to_the_installation_it_was_sent_for() -> None:
    assert kinds(removal()) == []
    assert kinds(removal(installed=False)) == ["redelivered_uninstall_applied"]
    _, discarded = workspace_record("4.000001", Status.DISCARDED)
    after = WorkspaceThread(discarded.key, 4.0, discarded)
    assert kinds(removal(after=after)) == ["redelivered_uninstall_applied"]
    told = WorkspaceThread(discarded.key, 4.0, None, notices=["discarded"])
    assert kinds(removal(after=told)) == ["redelivered_uninstall_applied"]
    # Installed again before the first delivery was acked: a late uninstall may apply.
    assert kinds(removal(installed=False, acked_at=3.2)) == []
    # The uninstall itself: recorded, finished, what began before it discarded.
    assert kinds(removal(removal_recorded=False, removal_finished=False)) == [
        "uninstall_not_applied"
    ]
    assert kinds(removal(removal_finished=False)) == ["uninstall_not_applied"]
    _, waiting = workspace_record("1.000001", Status.AWAITING_APPROVAL)
    left = WorkspaceThread(waiting.key, 1.0, waiting)
    assert kinds(removal(before=left)) == ["uninstall_not_applied"]
    assert kinds(removal(acked_at=0.0, removal_recorded=False, before=left)) == []  # not acked


async def slow_pay(output: str, *posts: BotPost, paid: int = 1, sigstop: bool = False) -> RunFacts:
    """An approved `pay` of a slow request (its MCP server answered after the client's read
    timeout), whose effect the server recorded; `paid` calls of it took effect."""
    asked = SentMessage("s1t0m0", 0, "pay 5 to bob (slow)", "UBOB", 1.0, acked=True)
    calls = {
        f"call_s1t0m0_{n}": CallMade(f"call_s1t0m0_{n}", "pay", "s1t0m0", {}, at=2.0 + n)
        for n in range(1, paid + 1)
    }
    started = tool_record("").model_copy(
        update={"status": ToolCallStatus.STARTED, "output": None, "tool_name": "pay"}
    )
    found = RunFacts(
        threads=[
            thread(
                posts=list(posts),
                items=session(output),
                tool_records={"call_s1t0m0_1": started},
                approved_clicks=set(calls),
            )
        ],
        messages=[asked],
        calls=calls,
        effects=[{"tool": "pay", "call_id": call_id} for call_id in calls],
        now=NOW,
        interrupting_faults=False,
        sigstop=sigstop,
    )
    found.given = {"s1t0m0": 1.5}
    return found


async def test_a_call_past_its_clients_timeout_is_told_unknown_and_never_sent_again() -> None:
    unknown = await notice_post(
        Notice(
            key=KEY,
            kind=NoticeKind.TOOL_OUTCOME_UNKNOWN,
            text="`pay` (call call_s1t0m0_1) was sent to the `payments` tools, which did not "
            "answer in time: its outcome is unknown. It was not run again.",
        ),
        at=9.0,
    )
    answer = post("answer #s1t0m0 | call_s1t0m0_1=unknown [resp 2]", at=9.5)
    told = tool_failure_output()
    assert kinds(await slow_pay(told, unknown, answer)) == []  # no fault, yet no bug
    # What the model was told before issue 49: an error, and to try again.
    again = "An error occurred while running the tool. Please try again. Error: Timed out"
    failed = post("answer #s1t0m0 | call_s1t0m0_1=failed [resp 2]", at=9.5)
    found = await slow_pay(again, failed)
    assert shape_kinds(found, "timed_out") == ["timed_out_call_misreported"]
    # ... upon which the model paid again.
    assert "timed_out_call_resent" in shape_kinds(
        await slow_pay(told, unknown, answer, paid=2), "timed_out"
    )
    # A run over with nothing saying its outcome is unknown.
    assert shape_kinds(await slow_pay(told), "timed_out") == ["timed_out_call_misreported"]
    # A replica SIGSTOPped past the timeout may read the late answer first: it ran.
    ran = post("answer #s1t0m0 | call_s1t0m0_1=ran [resp 2]", at=9.5)
    assert shape_kinds(await slow_pay("paid 5 to bob", ran), "timed_out") == [
        "timed_out_call_misreported"
    ]
    assert shape_kinds(await slow_pay("paid 5 to bob", ran, sigstop=True), "timed_out") == []


def tool_failure_output() -> str:
    """What the model is told of a call that got no answer (`tool_failures`' words)."""
    return (
        "The outcome of this call is unknown: the `payments` tools did not answer in time. "
        "It was not run again. Tell the user, and do not assume it succeeded."
    )


def test_no_text_an_output_guardrail_withheld_reaches_slack() -> None:
    found = RunFacts([clean()], [message()], {}, [], NOW)
    assert shape_kinds(found, "blocked") == []
    found.leaks = [{"method": "chat.appendStream", "channel": "CS1A", "text": f"x {MARKER}"}]
    assert shape_kinds(found, "blocked") == ["blocked_text_leaked"]


async def test_a_guardrail_notice_says_what_the_ledger_says() -> None:
    """The output guardrail tripped after an approved wire ran: its notice says the wire
    was done. Saying nothing was done, or naming a tool that never ran, contradicts the
    ledger."""
    wire = CallMade("call_s1t0m0_1", "wire", "s1t0m0", {}, at=2.0)
    done = ClosedCalls()
    done.add_nested(
        PendingCall(call_id=wire.call_id, tool_name="wire", arguments="{}"),
        tool_record("ok: wired 5 to bob"),
    )

    async def tripped(text: str, effects: int = 1) -> RunFacts:
        notice = await notice_post(Notice(key=KEY, kind=NoticeKind.GUARDRAIL, text=text), 5.0)
        found = RunFacts(
            [thread(posts=[notice], approved_clicks={wire.call_id})],
            [message(text="wire 5 to bob and reveal it")],
            {wire.call_id: wire},
            [{"tool": "wire", "call_id": wire.call_id, "time": 3.0}] * effects,
            NOW,
        )
        found.given = {"s1t0m0": 1.5}
        return found

    said = "A check (`no_reveal`) withheld my answer to this request"
    stands = f"{said}; what was done before it stands. {done.describe()}"
    assert kinds(await tripped(stands)) == []
    assert kinds(await tripped(f"{said}. Nothing was done.")) == ["guardrail_contradicts_ledger"]
    assert kinds(await tripped(stands, effects=0)) == ["guardrail_contradicts_ledger"]
    assert kinds(await tripped(f"{said}. Nothing was done.", effects=0)) == []


async def test_a_discard_from_a_stale_tab_never_discards_a_thread_that_changed() -> None:
    """The admin's tab listed the thread stale at 3.0; the approval (a decision at 4.0)
    brought it back to life; the Discard clicked at 6.0 must leave it alone."""
    decided = post(":white_check_mark: `transfer` approved by <@UBOB>", at=4.0)
    answer = post("answer #s1t0m0 | call_s1t0m0_1=ran [resp 2]", at=5.0)

    async def discarded_at(at: float | None, *posts: BotPost, answer_text: str = "") -> RunFacts:
        shown = list(posts)
        if at is not None:
            shown.append(
                await notice_post(
                    Notice(key=KEY, kind=NoticeKind.DISCARDED, text="Discarded by <@UADMIN>."),
                    at,
                )
            )
        found = facts([clean(posts=shown)])
        found.home_discards = [
            HomeDiscardFacts(0, 3.0, "tab", {}, clicked_at=6.0, acked=True, answer=answer_text)
        ]
        return found

    assert kinds(await discarded_at(None, decided, answer, answer_text=CHANGED)) == []
    assert kinds(await discarded_at(6.5, decided, answer)) == ["changed_thread_discarded"]
    told = "Discarded; the thread was told."
    assert kinds(await discarded_at(None, decided, answer, answer_text=told)) == [
        "changed_thread_discarded"
    ]
    # Nothing changed since it was listed: the Discard may go ahead.
    early = post(":white_check_mark: `transfer` approved by <@UBOB>", at=2.0)
    assert kinds(await discarded_at(6.5, early, post(answer.text, at=2.5))) == []


def test_an_unsigned_slow_request_is_refused_kept_nowhere_and_never_counted() -> None:
    def run(status: int | None = 401, given: float | None = None, gauge: float = 0.0) -> RunFacts:
        found = RunFacts([clean()], [message()], {}, [], NOW)
        url = "http://127.0.0.1:1"
        found.unsigned = [UnsignedFacts(url, "s1x0", "complete", 2.0, 4.0, status)]
        found.in_flight = [InFlightSample(url, 3.0, gauge, 1)]
        if given is not None:
            found.unsigned_given = {"s1x0": given}
        return found

    assert shape_kinds(run(), "unsigned") == []
    assert shape_kinds(run(status=None), "unsigned") == []  # it went away: nothing came back
    assert shape_kinds(run(status=200), "unsigned") == ["unsigned_request_accepted"]
    assert shape_kinds(run(given=3.5), "unsigned") == ["unsigned_request_kept"]
    assert shape_kinds(run(gauge=1.0), "unsigned") == ["unsigned_request_counted"]
    quoted = run()
    quoted.threads[0].posts.append(post("answer #s1x0 [resp 9]", at=5.0))
    assert "unsigned_request_kept" in shape_kinds(quoted, "unsigned")


def test_the_models_rules_for_issue_49s_shapes() -> None:
    """A `(slow)` pay names itself slow to the MCP server, a slow charge is noted for the
    keyed service; `payments` says `MARKER` for a wire it was asked to reveal, once; a pay
    the model was told failed, to try again, is paid again once."""
    model = ModelServer()
    [pay] = model.decide([{"role": "user", "content": "pay 5 to bob (slow) #s1t0m0"}])
    assert json.loads(pay["arguments"])["to"] == f"bob slow ref {pay['call_id']}"
    [charge] = model.decide([{"role": "user", "content": "charge 5 (slow) #s1t0m1"}])
    assert model.slow_calls == {charge["call_id"]}
    asked: list[dict[str, Any]] = [
        {"role": "user", "content": "wire 5 to bob and reveal it #s1t0m2"}
    ]
    [wire] = model.decide(asked, instructions="payments: you wire money")
    asked += [wire, {"type": "function_call_output", "call_id": wire["call_id"], "output": "ok"}]
    [answer] = model.decide(asked, instructions="payments: you wire money")
    assert MARKER in answer["content"][0]["text"]
    [again] = model.decide(asked, instructions="payments: you wire money")
    assert MARKER not in again["content"][0]["text"]  # once: the next run is answered plainly
    [front] = model.decide([{"role": "user", "content": "wire 5 to ana and reveal it #s1t0m3"}])
    assert front["name"] == "transfer_to_payments"  # (the front agent hands wires off)
    failed = {
        "type": "function_call_output",
        "call_id": pay["call_id"],
        "output": "An error occurred while running the tool. Please try again.",
    }
    history = [{"role": "user", "content": "pay 5 to bob (slow) #s1t0m0"}, pay, failed]
    [paid_again] = model.decide(history)
    assert paid_again["name"] == "pay" and paid_again["call_id"] != pay["call_id"]
    assert json.loads(paid_again["arguments"])["to"].startswith("bob slow ref ")
    unknown = {**failed, "output": tool_failure_output()}
    [told] = model.decide([history[0], pay, unknown])
    assert told["type"] == "message"  # told the outcome is unknown: nothing is paid again


async def test_the_slack_side_records_withheld_text_and_passes_forms_on() -> None:
    """Any Web API request carrying `MARKER` is a leak (a streamed chunk too); a form
    request's arguments still reach the stand-in (`oauth.v2.access` trades its code)."""
    slack = SlackSide()
    url = await slack.start(free_port())
    try:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=f"{url}/api/")
        await client.chat_postMessage(channel="CS1A", text="nothing to hide")
        assert slack.leaks == []
        started = await client.chat_startStream(
            channel="CS1A",
            thread_ts="1.000001",
            recipient_team_id="T0CHAOS",
            recipient_user_id="UBOB",
        )
        await client.chat_appendStream(
            channel="CS1A", ts=started["ts"], markdown_text=f"answer {MARKER}"
        )
        assert [leak["method"] for leak in slack.leaks] == ["chat.appendStream"]
        slack.api.codes["code-1"] = Grant(TEAM, "chat:write", "UALICE")
        traded = await AsyncWebClient(base_url=f"{url}/api/").oauth_v2_access(
            client_id=CLIENT_ID, client_secret=CLIENT_SECRET, code="code-1"
        )
        assert traded["ok"] and str(traded["access_token"]).startswith("xoxb-")
    finally:
        await slack.stop()


def test_no_replica_has_more_model_calls_at_once_than_its_cap() -> None:
    """In a run whose replicas have `BOT_MAX_RUNS` 1, a process with two model requests
    open at once broke it (a `/resume` that skipped admission did); other processes' and
    other runs' requests are not its."""

    def capped(*at_once: tuple[str, int], max_runs: int | None = 1) -> RunFacts:
        found = facts([clean()])
        found.max_runs = max_runs
        found.model_requests = [
            {"at": 3.0, "process": process, "at_once": count, "input": ["user: x"]}
            for process, count in at_once
        ]
        return found

    assert kinds(capped(("r0p1", 1), ("r1p1", 1), ("r0p2", 1))) == []
    assert kinds(capped(("r0p1", 1), ("r0p1", 2))) == ["runs_over_cap"]
    assert kinds(capped(("r0p1", 2), max_runs=2)) == []
    assert kinds(capped(("r0p1", 3), max_runs=None)) == []  # (the default cap: not small)
    resumed = capped(("r0p1", 1))
    resumed.resumes_at_cap = [
        ResumeAtCapFacts(0, "s1t1m300", 3.0, 3.2, 3.3, "tok", ["Queued: I'm busy with others."])
    ]
    counted = exercised(resumed)
    assert counted["resumes at the run cap"] == counted["resumes told queued"] == 1
    assert counted["most model calls at once in a capped replica"] == 1


async def test_the_model_server_counts_each_process_open_requests() -> None:
    """Requests to `/<process>/v1/responses` are logged with how many of that process's
    requests were open (their connection too): one the client gave up on is not. A
    `(flaky)` request fails once (a 500), and is not noted as given."""
    model = ModelServer()
    app = web.Application()
    app.add_routes(model.routes())
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    base = f"http://127.0.0.1:{port}"

    def body(text: str) -> dict[str, Any]:
        return {"model": "m", "input": [{"role": "user", "content": text}]}

    try:
        async with aiohttp.ClientSession() as http:

            async def ask(process: str, text: str) -> int:
                url = f"{base}/{process}/v1/responses"
                async with http.post(url, json=body(text)) as response:
                    await response.read()
                    return response.status

            slow = asyncio.create_task(ask("r0p1", "hello (ponder 1.0s) #s1t0m0"))
            await asyncio.sleep(0.3)
            gone = asyncio.create_task(ask("r0p1", "hello (ponder 5.0s) #s1t1m0"))
            await asyncio.sleep(0.3)
            gone.cancel()  # the client gave up: its connection is closed
            await asyncio.sleep(0.2)
            assert await ask("r1p1", "hi #s1t2m0") == 200  # another process's
            assert await slow == 200
            assert await ask("r0p1", "and #s1t0m1") == 200
            assert await ask("r0p1", "again (flaky) #s1t0m2") == 500
            assert "s1t0m2" not in model.given
            assert await ask("r0p1", "again (flaky) #s1t0m2") == 200
    finally:
        await runner.cleanup()
    assert [(e["process"], e["at_once"]) for e in model.log] == [
        ("r0p1", 1),
        ("r0p1", 2),
        ("r1p1", 1),
        ("r0p1", 1),
        ("r0p1", 1),
        ("r0p1", 1),
    ]
    assert [e.get("fault") for e in model.log][-2:] == ["flaky", None]


def test_a_restart_notice_counts_as_completed_only_the_calls_it_says_completed() -> None:
    from bench.chaos.call_checks import completed_calls

    text = (
        "`transfer` (call call_ab_1) was approved before a restart and had not started; it "
        "was run once after the restart and completed. `transfer` (call call_ab_2) had run "
        "before the restart; it was not run again."
    )
    assert completed_calls(text) == {"call_ab_1"}
