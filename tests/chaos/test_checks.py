"""The chaos soak's judgement, without processes: the classification of what the real poster
sends, the scripted model's rules, and the invariant checks on hand-made facts (each check
must fire on a violation and stay quiet on a clean run)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bench.chaos.classify import PostKind, classify_post
from bench.chaos.invariants import (
    BotPost,
    RunFacts,
    SentMessage,
    ThreadFacts,
    check,
)
from bench.chaos.model import CallMade, ModelServer
from bench.chaos.slack import SlackSide
from bot.runtime import DeliveryRef, not_taken
from bot.runtime.envelope import UserMessage
from bot.runtime.expiry import expiry_text
from bot.runtime.guard import UNKNOWN_OUTCOME
from bot.runtime.outcomes import (
    Answer,
    ApprovalRequest,
    Decided,
    Notice,
    NoticeKind,
    Outcome,
    PendingCall,
)
from bot.runtime.text import quote
from bot.slackapp.clients import OneWorkspace
from bot.slackapp.poster import SlackPoster
from storage import (
    Conversation,
    ConversationKey,
    Expiry,
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

    async def chat_postMessage(self, **kwargs: Any) -> dict[str, Any]:
        self.posts.append(kwargs)
        return {"ok": True}

    async def chat_update(self, **kwargs: Any) -> dict[str, Any]:
        return {"ok": True}

    async def conversations_replies(self, **kwargs: Any) -> dict[str, Any]:
        return {"ok": True, "messages": []}

    async def auth_test(self) -> dict[str, Any]:
        return {"ok": True, "bot_id": "BCHAOS"}


async def posted(outcome: Outcome, ref: str = "3.0") -> list[dict[str, Any]]:
    client = RecordingClient()
    clients = OneWorkspace(client)  # type: ignore[arg-type]
    await SlackPoster(clients)(outcome, DeliveryRef(id=ref))
    return client.posts


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
    [decision] = await posted(decided)
    assert classify_post(decision).kind is PostKind.DECISION
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
        created_at=NOW,
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
    unknown = clean(
        posts=[post("answer #s1t0m0 | call_s1t0m0_1=unknown [resp 2]")],
        items=session(UNKNOWN_OUTCOME),
        tool_records={},
    )
    assert kinds(facts([unknown])) == ["unknown_outcome_unannounced"]
    unknown.dead_channel = True  # nothing can be posted there
    assert kinds(facts([unknown])) == []
    unknown.dead_channel = False
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
    told = not_taken.notice(KEY, [UserMessage(user="UBOB", text=m.text) for m in refused])
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
