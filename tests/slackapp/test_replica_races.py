"""Stop means stop, and says what happened (issue 30), over real processes: two
`python -m bot serve` replicas on one store (one data directory, or one table and bucket),
each on its own port, both talking to one Web API stand-in and one model stand-in (the real
OpenAI model class against `/v1/responses`), fed signed requests. Each race is tried
`STOP_RACE_TRIES` times (20 unless told), each try on a new thread, the tries of a race at
once, with the delay between the two requests spread over the race's window. The evidence
is what the threads show (the stand-in's record), the transfers counted in a file outside
every process, and the tool ledger read from the store afterwards: a notice never
contradicts them."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_asyncio

from bot.slackapp.agent_blocks import STOP, stop_blocks
from bot.slackapp.blocks import APPROVE
from bot.standin.slack_api import Message, SlackWebApi
from storage import Conversation, Status, Store, ToolCallRecord, ToolCallStatus
from storage.aws import create_resources
from testkit.health import wait_healthy
from testkit.prefork import popen
from testkit.responses import RespondingResponses, message, responses_server, tool_call
from testkit.services import free_port
from testkit.slack import CHANNEL, SECRET, TEAM, Harness, running_api, thread_key
from tests.conftest import Backend

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

TRIES = int(os.getenv("STOP_RACE_TRIES", "20"))
ALICE, BOB, ADMIN = "UALICE", "UBOB", "UADMIN"  # Bob is an approver, the admin an admin
TRANSFER_SECONDS = 1.0  # how long the approved side effect takes
SLOW_MODEL = 0.5  # seconds a slow model turn takes to answer
TAG = re.compile(r"\btry-\d-\d+\b")
FINISHED = "It had already finished before your stop arrived; nothing was stopped."
NOTHING_RUNNING = "Nothing is running there right now."


# -- the model ---------------------------------------------------------------------------


@dataclass
class Plan:
    """What the model does in one try's thread: call `transfer` first (a side effect a
    person approves), or answer at once, after `hold` seconds."""

    transfer: bool
    hold: float = 0.0
    asked: asyncio.Event = field(default_factory=asyncio.Event)  # asked for the answer


class Model:
    """Answers each request by the try its thread belongs to (the tag its first message
    carries), so that the tries of a race can run at once."""

    def __init__(self) -> None:
        self.plans: dict[str, Plan] = {}
        self.loop = asyncio.get_running_loop()
        self.server = RespondingResponses(self.respond)

    def plan(self, tag: str, *, transfer: bool, hold: float = 0.0) -> Plan:
        self.plans[tag] = Plan(transfer, hold)
        return self.plans[tag]

    def respond(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        items = [i for i in request.get("input") or [] if isinstance(i, dict)]
        found = TAG.search(json.dumps(items))
        if found is None or found[0] not in self.plans:
            raise RuntimeError("a request of no try")  # answered 500
        tag, plan = found[0], self.plans[found[0]]
        said = [i for i in items if i.get("role") == "user"]
        if said and tag not in json.dumps(said[-1]):
            return [message(f"(an answer to a later message in {tag})")]
        if plan.transfer and not any(i.get("type") == "function_call_output" for i in items):
            return [tool_call("transfer", {"amount": 5, "to": "bob"}, call_id(tag))]
        self.loop.call_soon_threadsafe(plan.asked.set)
        time.sleep(plan.hold)  # this request's own server thread
        return [message(f"Done with {tag}.")]


def call_id(tag: str) -> str:
    return f"call-{tag}"


# -- two replicas ------------------------------------------------------------------------


@dataclass
class Pair:
    api: SlackWebApi
    replicas: list[Harness]
    processes: list[subprocess.Popen[bytes]]
    model: Model
    store: Store
    effects: Path
    log: Path
    backend: str

    def replica(self, n: int) -> Harness:
        return self.replicas[n % 2]

    def ran(self, tag: str) -> int:
        """Executions of the try's transfer, as counted outside every process."""
        if not self.effects.exists():
            return 0
        lines = self.effects.read_text().splitlines()
        return sum(json.loads(line)["call_id"] == call_id(tag) for line in lines)

    async def ledger(self, top: Message, tag: str) -> ToolCallRecord | None:
        return await asyncio.to_thread(self.store.get_tool_call, thread_key(top.ts), call_id(tag))

    async def holder(self, top: Message) -> int | None:
        """Which replica holds the thread right now (its index), if any."""
        record = await asyncio.to_thread(self.store.get, thread_key(top.ts))
        owner = record.lease_owner if record is not None else None
        for index, process in enumerate(self.processes):
            if owner and f"|{process.pid}|" in owner:
                return index
        return None

    def index(self, replica: Harness) -> int:
        return self.replicas.index(replica)

    def posts(self, top: Message) -> list[Message]:
        return self.api.bot_replies(CHANNEL, top.ts)

    async def stopped_notices(self) -> list[float]:
        """Each replica's count of STOPPED notices posted so far (its /metrics)."""
        counts = []
        for replica in self.replicas:
            async with replica.http.get(f"{replica.bot_url}/metrics") as page:
                found = re.search(r'bot_notices_total\{kind="stopped"\} (\S+)', await page.text())
            counts.append(float(found[1]) if found else 0.0)
        return counts


def backend_env(name: str, request: pytest.FixtureRequest, data: Path) -> dict[str, str]:
    if name == "local":
        return {"BOT_STORAGE": "local", "BOT_DATA_DIR": str(data)}
    request.getfixturevalue("aws_services")
    suffix = uuid.uuid4().hex[:12]
    env = {"BOT_STORAGE": "aws", "BOT_TABLE": f"t-{suffix}", "BOT_BUCKET": f"b-{suffix}"}
    create_resources(env["BOT_TABLE"], env["BOT_BUCKET"])
    return env


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["local", "aws"])
async def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Pair]:
    """Two bot processes, started once for every race on the backend."""
    name = str(request.param)
    root = tmp_path_factory.mktemp(f"races-{name}")
    backend = Backend(name, backend_env(name, request, root / "data"))
    api = SlackWebApi(team=TEAM)
    model = Model()
    log, effects = root / "bots.log", root / "effects.jsonl"
    with responses_server(model.server) as model_url:
        async with running_api(api) as api_url:
            base = {
                **os.environ,
                **backend.env,
                "SLACK_BOT_TOKEN": "xoxb-test",
                "SLACK_SIGNING_SECRET": SECRET,
                "SLACK_API_URL": f"{api_url}/api/",
                "HOST": "127.0.0.1",
                "OPENAI_API_KEY": "sk-test",
                "OPENAI_BASE_URL": model_url,
                "BOT_MODEL": "gpt-scripted",
                "BOT_AGENT": "testkit.survival_agent:build_agent",
                "BOT_APPROVERS": BOB,
                "BOT_ADMINS": ADMIN,
                "EFFECTS_FILE": str(effects),
                "TRANSFER_SECONDS": str(TRANSFER_SECONDS),
                "OPENAI_AGENTS_DISABLE_TRACING": "1",
            }
            base.pop("SLACK_APP_TOKEN", None)
            ports = [free_port(), free_port()]
            processes = [start_replica({**base, "PORT": str(port)}, log) for port in ports]
            replicas = [
                Harness(api, api_url, f"http://127.0.0.1:{port}", cast(Any, None), cast(Any, None))
                for port in ports
            ]
            store = backend.open()
            try:
                for replica, process in zip(replicas, processes, strict=True):
                    await healthy(replica, process, log)
                yield Pair(api, replicas, processes, model, store, effects, log, name)
            finally:
                for process in processes:
                    process.send_signal(signal.SIGTERM)
                for process in processes:  # the stand-ins answer while they drain
                    try:
                        await asyncio.to_thread(process.wait, 30)
                    except subprocess.TimeoutExpired:
                        process.kill()
                for replica in replicas:
                    await replica.close()
                store.close()
    whole = tail(log, None)  # what both replicas logged: no failure was a crash
    assert "Traceback" not in whole, whole[-5000:]


def start_replica(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return popen([sys.executable, "-m", "bot", "serve"], env=env, stdout=out, stderr=out)


def tail(log: Path, characters: int | None = 5000) -> str:
    text = log.read_text()
    return text if characters is None else text[-characters:]


async def healthy(replica: Harness, process: subprocess.Popen[bytes], log: Path) -> None:
    await wait_healthy(replica.bot_url, process, log)


# -- reading a thread --------------------------------------------------------------------


def kind(post: Message) -> str:
    payload = (post.metadata or {}).get("event_payload") or {}
    return str(payload.get("kind", ""))


def notices(posts: list[Message], notice: str) -> list[Message]:
    return [
        p
        for p in posts
        if kind(p) == "Notice" and (p.metadata or {})["event_payload"].get("notice") == notice
    ]


def answers(posts: list[Message]) -> list[Message]:
    return [p for p in posts if kind(p) == "Answer"]


async def first_card(pair: Pair, top: Message) -> Message:
    """The approval request as it was posted (its buttons, before anything closed it)."""
    cards: list[Message] = await pair.api.wait_for(
        lambda: [p for p in pair.posts(top) if kind(p) == "ApprovalRequest"]
    )
    return copy.deepcopy(cards[0])


def card_is_closed(pair: Pair, card: Message) -> bool:
    now = pair.api.messages[(card.channel, card.ts)]
    return APPROVE not in json.dumps(now.blocks)


async def quiet(pair: Pair, top: Message, status: Status = Status.IDLE) -> Conversation:
    """Wait until the bot is done with the thread: released in `status`, every outcome
    delivered, nothing left in its inbox (answers to requests go out before the entries
    that asked for them are consumed)."""
    key = thread_key(top.ts)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        record = await asyncio.to_thread(pair.store.get, key)
        if (
            record is not None
            and (record.status, record.lease_owner) == (status, None)
            and record.undelivered_from() is None
            and not await asyncio.to_thread(pair.store.read_inbox, key)
        ):
            return record
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{key} never went quiet in {status}: {record}")


async def transfer_started(pair: Pair, tag: str) -> None:
    deadline = time.monotonic() + 30
    while not pair.ran(tag):
        assert time.monotonic() < deadline, f"{tag}: the transfer never started"
        await asyncio.sleep(0.02)


def the_truth(pair: Pair, posts: list[Message], tag: str, call: ToolCallRecord | None) -> None:
    """What the thread says of the try's transfer agrees with the ledger and with the
    executions counted outside: it ran at most once, and only a completed call ran; "not
    run" only of a call that did not run, "already done" only of one that did; "outcome
    unknown" only of a call that a discard overtook as it ran, and then its result follows;
    a cancelled call is said to have been stopped before it ran; no call is left started."""
    ran = pair.ran(tag)
    completed = call is not None and call.status is ToolCallStatus.COMPLETED
    assert ran == (1 if completed else 0), (tag, ran, call)
    assert call is None or call.status is not ToolCallStatus.STARTED, (tag, call)
    texts = [p.shown_text() for p in posts]
    for text in texts:
        if "Not run: `transfer`" in text or "Stopped before it ran (not run)" in text:
            assert ran == 0, (tag, text)
        if "Already done" in text:
            assert ran == 1, (tag, text)
        if "outcome unknown" in text:
            assert completed and notices(posts, "tool_finished_late"), (tag, texts)
    if call is not None and call.status is ToolCallStatus.CANCELLED:
        assert any("Stopped before it ran (not run): `transfer`" in t for t in texts), texts
    if answers(posts) and call is not None:
        assert completed, (tag, texts)


def spread(n: int, top: float, power: float = 1.0) -> float:
    """The n-th try's delay: from 0 to `top` over the tries (denser near 0 for power > 1)."""
    return top * float((n / max(TRIES - 1, 1)) ** power)


Attempt = Callable[[int, str], Awaitable[str]]


async def each_try(race: int, pair: Pair, attempt: Attempt) -> Counter[str]:
    """Every try of a race at once, each with its own tag (and thread); what each came to,
    counted. A failed try is explained by its thread."""

    async def one(n: int) -> str:
        tag = f"try-{race}-{n}"
        try:
            return await attempt(n, tag)
        except AssertionError as exc:
            raise AssertionError(f"{tag}: {exc}\n{thread_dump(pair, tag)}") from None

    return Counter(await asyncio.gather(*(one(n) for n in range(TRIES))))


def report(pair: Pair, race: str, tally: Counter[str], started: float, **notes: Any) -> None:
    """What the tries came to, for `pytest -s`."""
    seconds = time.monotonic() - started
    print(f"\n[{pair.backend}] {race}: {TRIES} tries in {seconds:.1f}s: {dict(tally)} {notes}")


def thread_dump(pair: Pair, tag: str) -> str:
    """The try's thread as the stand-in has it, ephemeral messages included."""
    tops = [m for m in pair.api.messages.values() if tag in m.text and m.thread_ts is None]
    lines = []
    for top in tops:
        for post in pair.api.thread(CHANNEL, top.ts):
            to = f" (only to {post.ephemeral_to})" if post.ephemeral_to else ""
            lines.append(f"  {post.user}{to} [{kind(post)}]: {post.shown_text()[:400]!r}")
    return "\n".join(lines)


def stop_control(top: Message) -> Message:
    """The Stop control as its requester sees it (ephemeral, in the thread)."""
    control = Message(CHANNEL, f"{top.ts}9", "", "UBOT", top.ts, stop_blocks(thread_key(top.ts)))
    control.ephemeral_to = ALICE
    return control


async def press_stop(replica: Harness, top: Message) -> str:
    """Alice presses Stop; returns the click's response_url token once the control gave
    its own answer (it replaces the control; a holder may tell her more, even before)."""
    status, token = await replica.press(stop_control(top), STOP, ALICE)
    assert status == 200
    await replica.api.wait_for(
        lambda: [
            r for r in replica.api.responses if r["_token"] == token and r.get("replace_original")
        ]
    )
    return token


def told(replica: Harness, token: str) -> list[str]:
    return [r["text"] for r in replica.api.responses if r["_token"] == token]


# -- the races ---------------------------------------------------------------------------


async def test_a_stop_as_the_card_is_posted_then_approve_runs_nothing(pair: Pair) -> None:
    """`stop` replied as the approval request is posted (before the holder lets the thread
    go, or just after), then Approve: nothing runs, the thread says the call was stopped
    (not run), the card is closed, and the late click is told who stopped it."""
    started, before = time.monotonic(), await pair.stopped_notices()

    async def attempt(n: int, tag: str) -> str:
        pair.model.plan(tag, transfer=True)
        home = pair.replica(n)
        stopper, approver = pair.replica(n // 2), pair.replica(n // 4)
        top = await home.mention(ALICE, f"transfer 5 to bob, {tag}")
        card = await first_card(pair, top)
        await asyncio.sleep(spread(n, 0.3, power=2))
        await stopper.reply(ALICE, "stop", top.ts)
        holder = await pair.holder(top)  # after the stop was kept, before the click
        status, token = await approver.press(card, APPROVE, ALICE)
        assert status == 200
        [late] = await approver.responses_for(token)
        assert late["text"] == f"That call was stopped by <@{ALICE}> before it ran."
        await quiet(pair, top)
        posts = pair.posts(top)
        [stopped] = notices(posts, "stopped")
        assert f"Stopped by <@{ALICE}>." in stopped.text and "Not run: `transfer`" in stopped.text
        assert not answers(posts) and not [p for p in posts if kind(p) == "Decided"]
        assert card_is_closed(pair, card)
        assert "approved by" not in pair.api.messages[(card.channel, card.ts)].text
        call = await pair.ledger(top, tag)
        the_truth(pair, posts, tag, call)
        assert call is None and pair.ran(tag) == 0
        if stopper is home:
            return "stop on the card's replica"
        if holder == pair.index(home):
            return "stop on the other replica, kept while the card's replica held the thread"
        if holder == pair.index(stopper):
            return "stop on the other replica, which took the paused thread"
        return "stop on the other replica, thread free again when looked at"

    tally = await each_try(1, pair, attempt)
    by = [a - b for a, b in zip(await pair.stopped_notices(), before, strict=True)]
    report(pair, "stop as the card is posted", tally, started, notices_by_replica=by)
    assert sum(by) == TRIES  # one notice per try, from whichever replica applied the stop


async def test_a_stop_on_the_other_replica_stops_the_run_or_is_told_it_had_finished(
    pair: Pair,
) -> None:
    """Alice presses Stop on one replica while the other runs her thread: a slow model turn
    (even tries) or the approved transfer (odd tries), pressed over a window that runs past
    the end of the run. The run stops at its next step (a STOPPED notice, no answer; a
    transfer that ran is said to have run), or she is told it had already finished (the
    answer stands), or that nothing runs any more; never "Stopping it now." and then an
    answer with no word of the stop."""
    started, order = time.monotonic(), Counter[str]()

    async def attempt(n: int, tag: str) -> str:
        home, other = pair.replica(n // 2), pair.replica(n // 2 + 1)
        slow = n % 2 == 0
        plan = pair.model.plan(tag, transfer=not slow, hold=SLOW_MODEL if slow else 0.0)
        asked = "write an essay" if slow else "transfer 5 to bob"
        top = await home.mention(ALICE, f"{asked}, {tag}")
        if slow:
            await plan.asked.wait()
            await asyncio.sleep(spread(n, SLOW_MODEL + 0.5))
        else:
            card = await first_card(pair, top)
            assert (await home.press(card, APPROVE, ALICE))[0] == 200
            await transfer_started(pair, tag)
            await asyncio.sleep(spread(n, TRANSFER_SECONDS + 0.5))
        token = await press_stop(other, top)
        await quiet(pair, top)
        said = told(other, token)
        posts = pair.posts(top)
        stopped, answered = notices(posts, "stopped"), answers(posts)
        the_truth(pair, posts, tag, None if slow else await pair.ledger(top, tag))
        texts = [p.shown_text() for p in posts]
        if said == [NOTHING_RUNNING]:
            assert len(answered) == 1 and not stopped, texts
            branch = "finished and let go first (told nothing runs)"
        elif stopped:
            assert said == ["Stopping it now."] and not answered, (said, texts)
            [notice] = stopped
            assert f"Stopped by <@{ALICE}>." in notice.text
            if not slow:  # the transfer had started: it finished, and is said to have run
                assert "Already done (it ran once and is not repeated): `transfer`" in notice.text
            branch = "stopped"
        else:
            assert sorted(said) == sorted(["Stopping it now.", FINISHED]), said
            assert len(answered) == 1, texts
            branch = "finished before the stop (told so)"
        responses = [r for r in pair.api.responses if r["_token"] == token]
        [control] = [r for r in responses if r["text"] != FINISHED]
        assert control["replace_original"] is True  # the control became its own answer
        if responses[0] is not control:  # both true; in Slack they show in different places
            order["told it had finished before the control's own answer"] += 1
        return f"{'model turn' if slow else 'tool'}: {branch}"

    tally = await each_try(2, pair, attempt)
    report(pair, "stop on the other replica", tally, started, order=dict(order))


async def test_approve_then_stop_before_the_call_says_what_ran(pair: Pair) -> None:
    """Approve, then Stop 0 to 300 ms later (by button or reply, on the same replica or
    the other): the call was stopped before the decision (not run), or after it armed the
    call and before it started (cancelled in the ledger, "stopped before it ran"), or it ran
    (and the thread says so). Never "outcome unknown" of a call that did not start; the
    executions counted outside agree with the notice."""
    started = time.monotonic()

    async def attempt(n: int, tag: str) -> str:
        pair.model.plan(tag, transfer=True)
        home = pair.replica(n)
        stopper = pair.replica(n + n // 2)  # same, same, other, other, ...
        by_button = (n // 4) % 2 == 0
        top = await home.mention(ALICE, f"transfer 5 to bob, {tag}")
        card = await first_card(pair, top)
        status, token = await home.press(card, APPROVE, ALICE)
        assert status == 200
        await asyncio.sleep(spread(n, 0.3))
        if by_button:
            await press_stop(stopper, top)
        else:
            await stopper.reply(ALICE, "stop", top.ts)
        await quiet(pair, top)
        posts, call = pair.posts(top), await pair.ledger(top, tag)
        the_truth(pair, posts, tag, call)
        texts = [p.shown_text() for p in posts]
        assert not any("unknown" in text for text in texts), texts
        stopped = notices(posts, "stopped")
        assert len(stopped) <= 1, texts
        where = "same replica" if stopper is home else "other replica"
        if call is None:  # the stop was applied before the decision
            assert told(home, token) == [f"That call was stopped by <@{ALICE}> before it ran."]
            assert "Not run: `transfer`" in stopped[0].text
            return f"{where}: stopped before the decision (not run)"
        assert told(home, token) == []  # the decision counted
        if call.status is ToolCallStatus.CANCELLED:
            assert "Stopped before it ran (not run): `transfer`" in stopped[0].text
            return f"{where}: decided, stopped before it started (cancelled)"
        assert call.status is ToolCallStatus.COMPLETED and pair.ran(tag) == 1
        if stopped:
            assert "Already done (it ran once and is not repeated)" in stopped[0].text
            assert not answers(posts)
            return f"{where}: ran, then stopped"
        assert len(answers(posts)) == 1, texts
        return f"{where}: ran and finished before the stop"

    report(pair, "approve then stop", await each_try(3, pair, attempt), started)


async def test_two_approvals_at_once_run_the_call_once_and_the_loser_is_told(
    pair: Pair,
) -> None:
    """Alice (who asked) and Bob (an approver) click Approve at the same moment (0 to 50 ms
    apart), on different replicas: the transfer runs once, one decision is posted, and the
    other click is told who decided."""
    started = time.monotonic()

    async def click(replica: Harness, card: Message, user: str, wait: float) -> str:
        await asyncio.sleep(wait)
        status, token = await replica.press(card, APPROVE, user)
        assert status == 200
        return token

    async def attempt(n: int, tag: str) -> str:
        pair.model.plan(tag, transfer=True)
        top = await pair.replica(n).mention(ALICE, f"transfer 5 to bob, {tag}")
        card = await first_card(pair, top)
        gap, alice_first = spread(n, 0.05), n % 2 == 0
        a, b = pair.replicas
        tokens = dict(
            zip(
                (ALICE, BOB),
                await asyncio.gather(
                    click(a, card, ALICE, 0 if alice_first else gap),
                    click(b, card, BOB, gap if alice_first else 0),
                ),
                strict=True,
            )
        )
        await quiet(pair, top)
        posts = pair.posts(top)
        # The card says the decision, once; no post says it again.
        assert not [p for p in posts if kind(p) == "Decided"]
        decided = pair.api.messages[(card.channel, card.ts)]
        winner = ALICE if f"<@{ALICE}>" in decided.text else BOB
        loser = BOB if winner == ALICE else ALICE
        assert decided.text == f":white_check_mark: `transfer` approved by <@{winner}>"
        assert told(a, tokens[loser]) == [f"That call was already approved by <@{winner}>."]
        assert told(a, tokens[winner]) == []
        call = await pair.ledger(top, tag)
        the_truth(pair, posts, tag, call)
        assert pair.ran(tag) == 1 and len(answers(posts)) == 1
        return "the first click won" if (winner == ALICE) == alice_first else "the later click won"

    report(pair, "two approvals at once", await each_try(4, pair, attempt), started)


async def test_a_discard_during_the_running_tool_records_and_tells_its_result(
    pair: Pair,
) -> None:
    """An admin discards the thread (`/agent-admin discard <link>`, on either replica) 0 to
    600 ms into the approved transfer's second: the discard says the running call's outcome
    is unknown (true then), the transfer finishes, its result is recorded in the ledger under
    the call's own fence and the thread is told it (TOOL_FINISHED_LATE); the conversation
    goes no further."""
    started = time.monotonic()

    async def attempt(n: int, tag: str) -> str:
        pair.model.plan(tag, transfer=True)
        home, admin = pair.replica(n), pair.replica(n // 2)
        top = await home.mention(ALICE, f"transfer 5 to bob, {tag}")
        card = await first_card(pair, top)
        assert (await home.press(card, APPROVE, ALICE))[0] == 200
        await transfer_started(pair, tag)
        await asyncio.sleep(spread(n, 0.6))
        link = f"https://slack.com/archives/{CHANNEL}/p{top.ts.replace('.', '')}"
        status, token = await admin.command("/agent-admin", f"discard {link}", ADMIN)
        assert status == 200
        [reply] = await admin.responses_for(token)
        record = await quiet(pair, top, Status.DISCARDED)
        [discarded] = notices(pair.posts(top), "discarded")
        where = "same replica" if admin is home else "other replica"
        if "outcome unknown" in discarded.text:
            assert "outcome unknown: `transfer`" in reply["text"]
            late: list[Message] = await pair.api.wait_for(
                lambda: notices(pair.posts(top), "tool_finished_late"), within=30
            )
            assert "`transfer`" in late[0].text and "transferred 5 to bob" in late[0].text
            branch = f"{where}: discarded mid-tool, its result told late"
        elif "Already done (it ran once and is not repeated): `transfer`" in discarded.text:
            branch = f"{where}: discarded after the tool finished"
        else:  # the run was over (a try slowed down by the others)
            assert "No tool call was pending." in discarded.text
            assert len(answers(pair.posts(top))) == 1
            branch = f"{where}: discarded after the run had finished"
        posts = pair.posts(top)
        call = await pair.ledger(top, tag)
        assert call is not None and call.status is ToolCallStatus.COMPLETED
        assert call.output == "transferred 5 to bob"
        assert call.fence < record.fence  # recorded under its own fence, after the discard's
        the_truth(pair, posts, tag, call)
        assert len(notices(posts, "tool_finished_late")) <= 1
        if not branch.endswith("the run had finished"):  # it went no further
            assert not answers(posts)
        return branch

    report(pair, "discard during the tool", await each_try(5, pair, attempt), started)
