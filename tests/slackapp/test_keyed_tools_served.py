"""Keyed tools (issue 29) served by real `python -m bot serve` processes: a call cut short
right after the keyed service applied it (SIGKILL; SIGTERM with a grace shorter than the
call) is run again with the same idempotency key by the next process and ends with the
tool's answer; an unkeyed tool in the same place says "outcome unknown"; the keys the
service received differ between calls (threads, workspaces, turns) and are equal across
one call's attempts. The service (`testkit.keyed_service`) runs in the test process, outside
every bot process, and counts requests and effects."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.runtime import UNKNOWN_OUTCOME
from bot.standin.slack_api import Message
from storage import ToolCallStatus
from testkit.keyed_service import KeyedService, keyed_service
from testkit.responses import (
    ScriptedResponses,
    answered_call,
    calls_made,
    message,
    tool_call,
    user_text,
)
from testkit.served import ServedBot, channel_of, served_bot
from testkit.slack import Harness
from tests.conftest import Backend

pytestmark = pytest.mark.slow
ALICE = "UALICE"
OTHER_TEAM = "T0OTHER"
AGAIN = "run again with the same idempotency key (so it takes effect once) and completed"


@pytest.fixture
def service() -> Iterator[KeyedService]:
    with keyed_service() as running:
        yield running


def shop_model(request: dict[str, Any]) -> list[dict[str, Any]]:
    """ "charge N" calls `charge`, "book N" calls `book` (call ids numbered per thread, so
    the first call of every thread has the same id); a tool's output is answered with it."""
    answered = answered_call(request)
    if answered is not None:
        return [message(f"shop: {answered[1]}")]
    text = user_text(request)
    tool, argument = ("charge", "amount") if "charge" in text else ("book", "seats")
    found = re.search(r"\d+", text)
    number = int(found.group()) if found else 1
    call_id = f"call-{tool}-{calls_made(request, tool) + 1}"
    return [tool_call(tool, {argument: number}, call_id)]


def texts(bot: ServedBot, people: Harness, question: Message) -> list[str]:
    channel = channel_of(people.team)
    return [reply.text for reply in bot.api.bot_replies(channel, question.ts)]


async def answered(bot: ServedBot, people: Harness, question: Message, answer: str) -> list[str]:
    """Wait for `answer` in the question's thread, and for the thread to be idle."""
    await bot.api.wait_for(lambda: answer in texts(bot, people, question), within=30)
    await bot.idle(people, question.ts, channel=channel_of(people.team))
    return texts(bot, people, question)


def requests_of(service: KeyedService, people: Harness, question: Message, call_id: str) -> Any:
    """The keys of the requests one call (by team, thread and call id) made."""
    where = f"{people.team}/{question.ts}/{call_id} "
    return [str(r["key"]) for r in service.requests if str(r["what"]).startswith(where)]


def one_notice(replies: list[str], icon: str) -> str:
    [notice] = [reply for reply in replies if reply.startswith(icon)]
    return notice


async def test_keyed_calls_cut_short_are_run_again_with_their_keys(
    backend: Backend, tmp_path: Path, service: KeyedService
) -> None:
    """Two workspaces (installed through OAuth); `charge` is keyed, `book` is not, and both
    wait after their effect while the hold file exists.

    1. Both reached the service, then the process is SIGKILLed. The next one runs `charge`
       again with the same key (the service applies it once) and says so; `book` is
       "outcome unknown" and not run again.
    2. More charges: another turn, another thread, another workspace.
    3. SIGTERM with a 1 s grace while both wait (in new threads): both are cut short (left
       `started`); the next process completes `charge` with its key, `book` is unknown.
    Every call had a key of its own, the same on each of its attempts."""
    holding = tmp_path / "hold"
    holding.touch()
    async with served_bot(
        backend.env,
        backend.open(),
        tmp_path,
        ScriptedResponses([], respond=shop_model),
        agent="testkit.operator_agents:shop",
        teams=(OTHER_TEAM,),
        KEYED_SERVICE_URL=service.url,
        HOLD_FILE=str(holding),
        BOT_SHUTDOWN_GRACE="1s",
    ) as bot:
        people, other = bot.people, bot.workspace(OTHER_TEAM)
        await bot.start()
        await people.install()
        await other.install()
        charging = await people.mention(ALICE, "charge 9")
        await service.reached(1)  # (so that its effect is the first)
        booking = await people.mention(ALICE, "book 3")
        await service.reached(2)
        assert await bot.signal(signal.SIGKILL) == -signal.SIGKILL

        holding.unlink()
        await bot.start()
        charged = await answered(bot, people, charging, "shop: charged 9: effect-1")
        booked = await answered(bot, people, booking, "shop: " + UNKNOWN_OUTCOME)
        ledger = bot.store.get_tool_call(people.key(charging.ts), "call-charge-1")

        await people.reply(ALICE, "charge 4", charging.ts)
        await answered(bot, people, charging, "shop: charged 4: effect-3")
        elsewhere = await people.mention(ALICE, "charge 9")
        await answered(bot, people, elsewhere, "shop: charged 9: effect-4")
        there = await other.mention(ALICE, "charge 9", channel=channel_of(OTHER_TEAM))
        await answered(bot, other, there, "shop: charged 9: effect-5")

        holding.touch()
        late_charge = await people.mention(ALICE, "charge 5")
        await service.reached(7)
        late_booking = await people.mention(ALICE, "book 2")
        await service.reached(8)
        assert await bot.signal(signal.SIGTERM) == 0
        cut_short = bot.store.get_tool_call(people.key(late_charge.ts), "call-charge-1")
        holding.unlink()
        await bot.start()
        charged_late = await answered(bot, people, late_charge, "shop: charged 5: effect-6")
        booked_late = await answered(bot, people, late_booking, "shop: " + UNKNOWN_OUTCOME)

    for replies in (charged, charged_late):
        notice = one_notice(replies, ":repeat:")
        assert "`charge` (call call-charge-1)" in notice and AGAIN in notice, notice
        assert not any("unknown" in reply for reply in replies), replies
    for replies in (booked, booked_late):
        assert "`book`" in one_notice(replies, ":grey_question:")
    assert ledger is not None and ledger.status is ToolCallStatus.COMPLETED
    assert ledger.attempts == 2
    assert cut_short is not None and cut_short.status is ToolCallStatus.STARTED

    attempted = [
        requests_of(service, people, charging, "call-charge-1"),
        requests_of(service, people, late_charge, "call-charge-1"),
    ]
    assert [len(keys) for keys in attempted] == [2, 2]  # two requests each...
    assert [len(set(keys)) for keys in attempted] == [1, 1]  # ...with one key
    for thread in (booking, late_booking):
        assert len(requests_of(service, people, thread, "call-book-1")) == 1  # not run again
    keys = {
        *attempted[0],
        *attempted[1],
        *requests_of(service, people, charging, "call-charge-2"),  # another turn
        *requests_of(service, people, elsewhere, "call-charge-1"),  # another thread
        *requests_of(service, other, there, "call-charge-1"),  # another workspace
        *requests_of(service, people, booking, "call-book-1"),
        *requests_of(service, people, late_booking, "call-book-1"),
    }
    assert len(keys) == 7 and len(service.requests) == 9
    assert len(service.effects) == 7  # one per key
    assert " WARNING openai.agents" not in bot.log.read_text()
