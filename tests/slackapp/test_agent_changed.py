"""A conversation paused for approval, and the agent changed before anyone decided: the bot
is stopped, its agent's instructions change, and it starts again on the same storage and the
same Slack (a second runtime, as a deploy starts one). The real bolt app, signed requests,
the recording Web API stand-in; both storage backends.

As the bot starts (in the background: it is healthy meanwhile), each such conversation is
set aside: its thread told, its card closed, without waiting for a click on a card that
can do nothing. Two replicas starting at once tell each thread once. An agent whose MCP
server is down at start has no final fingerprint until the server lists its tools: nothing
is set aside meanwhile, and a paused run of the same agent is kept. Once set aside, the
conversation has one name wherever people and operators read it: "set aside"
(`/agent-admin status` and `list`, the Home tab, `/resume`), as its thread's notice and
its closed card say."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agents import Agent
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.permalink import permalink
from bot.settings import RuntimeSettings
from bot.slackapp.blocks import APPROVE
from bot.standin.slack_api import Message, SlackWebApi
from storage import Status, Store
from testkit.mcp_agent import payments_agent, payments_http
from testkit.runtime import SideEffects, build_agent
from testkit.services import free_port
from testkit.slack import CHANNEL, TEAM, Harness, running_api, runtime_of, slack_bot
from tests.conftest import Backend
from tests.runtime.test_mcp_servers import http_server
from tests.slackapp.test_home import open_home

ALICE, ADMIN = "UALICE", "UADMIN"
SETTINGS = RuntimeSettings(admins=frozenset({ADMIN}))


def emails() -> ScriptedModel:
    """Every request asks to send an email; once it was sent, the run says so."""

    def respond(call: Any) -> Any:
        items = call.input if isinstance(call.input, list) else []
        if any(isinstance(i, dict) and i.get("name") == "send_email" for i in items):
            return [assistant_message("Done: email sent.")]
        arguments = {"to": "ana@example.com", "body": "hi"}
        return [function_call("send_email", arguments, call_id=f"call-{uuid.uuid4().hex[:8]}")]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(20)])


def agent(effects: SideEffects, *, version: int) -> Agent[Any]:
    """The same tools; version 2 has other instructions (so another fingerprint)."""
    built = build_agent(emails(), effects)
    return built if version == 1 else built.clone(instructions="Be brief.")


@asynccontextmanager
async def bot_of(
    store: Store, api: SlackWebApi, effects: SideEffects, *, version: int
) -> AsyncIterator[Harness]:
    make = runtime_of(store, agent(effects, version=version), SETTINGS)
    async with slack_bot(store, make, admins=SETTINGS.admins, api=api) as harness:
        yield harness


async def paused_by_the_first_agent(
    store: Store, api: SlackWebApi, effects: SideEffects, threads: int = 1
) -> list[tuple[Message, Message]]:
    """Alice's requests and their cards (as her client shows them), each run paused for
    approval; then the bot stops."""
    paused = []
    async with bot_of(store, api, effects, version=1) as bot:
        for n in range(threads):
            top = await bot.mention(ALICE, f"email Ana ({n})")
            [card] = await bot.bot_replies(top.ts, 1)
            await bot.settled(top.ts, Status.AWAITING_APPROVAL)
            assert card.blocks is not None and APPROVE in json.dumps(card.blocks)
            paused.append((top, copy.deepcopy(card)))
    return paused


def notices(api: SlackWebApi, top: Message) -> list[str]:
    return [m.text for m in api.bot_replies(CHANNEL, top.ts) if m.text.startswith(":warning:")]


def closed(api: SlackWebApi, card: Message) -> bool:
    """The card as the thread shows it now: its buttons replaced, pointing to the notice."""
    shown = json.dumps(api.messages[(card.channel, card.ts)].blocks)
    return APPROVE not in shown and "Set aside: see below." in shown


async def test_the_threads_a_changed_agent_cannot_continue_are_told_at_start(
    store: Store, effects: SideEffects
) -> None:
    api = SlackWebApi(team=TEAM)
    async with running_api(api):
        [(top, card)] = await paused_by_the_first_agent(store, api, effects)
        told = api.hold("chat.postMessage")  # the notice waits in flight
        async with bot_of(store, api, effects, version=2) as bot:
            # Healthy (the harness waited for /healthz) while the sweep waits on its notice.
            sweep = bot.runtime.changed_agent
            assert sweep is not None and not sweep.done()
            told.set()
            await asyncio.wait_for(sweep, 30)
            await bot.settled(top.ts, Status.SET_ASIDE)
            [notice] = notices(api, top)
            assert "the agent changed since it was saved" in notice
            assert "Not run: `send_email`." in notice
            assert closed(api, card)

            # The card Alice still had on screen: clicked, nothing runs, she is told why.
            await bot.click(card, APPROVE, ALICE)
            [late] = await api.wait_for(lambda: api.responses)
            assert late["text"] == "That approval is no longer pending."
    assert effects.calls() == [] and len(notices(api, top)) == 1


async def test_replicas_starting_at_once_tell_each_thread_once(
    backend: Backend, effects: SideEffects
) -> None:
    def opened() -> Store:
        return backend.open(lease_seconds=5, lease_skew_seconds=0.2)

    api = SlackWebApi(team=TEAM)
    async with running_api(api), contextlib.AsyncExitStack() as replicas:
        paused = await paused_by_the_first_agent(opened(), api, effects, threads=3)
        started = await asyncio.gather(
            *(
                replicas.enter_async_context(bot_of(opened(), api, effects, version=2))
                for _ in range(2)
            )
        )
        sweeps = [bot.runtime.changed_agent for bot in started]
        await asyncio.wait_for(asyncio.gather(*(s for s in sweeps if s is not None)), 60)
        for top, card in paused:
            await started[0].settled(top.ts, Status.SET_ASIDE)
            assert len(notices(api, top)) == 1 and closed(api, card)
    assert effects.calls() == []


@pytest.mark.parametrize("backend", ["local"], indirect=True)  # the runtime's side: one
async def test_an_agent_whose_mcp_server_is_down_at_start_sets_nothing_aside(
    store: Store, tmp_path: Path
) -> None:
    """The same agent, its tools from an MCP server that is down when the bot starts again:
    until the server lists its tools the fingerprint is not final, so the paused run is not
    taken for another agent's; once it lists them, the run is its own and goes on."""
    mcp_effects = SideEffects(tmp_path / "mcp-effects.jsonl")
    port = free_port()

    def make(*steps: Any) -> Any:
        model = ScriptedModel([list(step) for step in steps])
        return runtime_of(
            store, payments_agent(payments_http(f"http://127.0.0.1:{port}/mcp"), model)
        )

    api = SlackWebApi(team=TEAM)
    async with running_api(api):
        with http_server(port, mcp_effects):
            first = make([function_call("pay", {"amount": 3, "to": "cy"}, call_id="c-pay")])
            async with slack_bot(store, first, api=api) as bot:
                top = await bot.mention(ALICE, "pay cy 3")
                [card] = await api.wait_for(lambda: api.bot_replies(CHANNEL, top.ts))
                await bot.settled(top.ts, Status.AWAITING_APPROVAL)
                card = copy.deepcopy(card)
        again = make([assistant_message("Paid 3 to cy.")])
        async with slack_bot(store, again, api=api) as bot:
            sweep = bot.runtime.changed_agent
            assert sweep is not None and bot.runtime.mcp.down() == ["payments"]
            with http_server(port, mcp_effects):
                await asyncio.wait_for(sweep, 60)  # once the server listed its tools
                assert api.bot_replies(CHANNEL, top.ts) == [card]  # nothing said
                record = bot.record(top.ts)
                assert record is not None and record.status is Status.AWAITING_APPROVAL
                await bot.click(card, APPROVE, ALICE)
                await api.wait_for(
                    lambda: "Paid 3 to cy." in [m.text for m in api.bot_replies(CHANNEL, top.ts)]
                )
    assert [(e["tool"], e.get("amount")) for e in mcp_effects.calls()] == [("pay", 3)]


async def test_a_conversation_set_aside_has_one_name_everywhere(
    store: Store, effects: SideEffects
) -> None:
    api = SlackWebApi(team=TEAM)
    async with running_api(api):
        [(top, _)] = await paused_by_the_first_agent(store, api, effects)
        async with bot_of(store, api, effects, version=2) as bot:
            await bot.settled(top.ts, Status.SET_ASIDE)
            assert effects.calls("send_email") == []

            _, token = await bot.command("/agent-admin", "status", ADMIN)
            [status] = await bot.responses_for(token)
            _, token = await bot.command("/agent-admin", "list", ADMIN)
            [listing] = await bot.responses_for(token)
            link = permalink(bot.key(top.ts))
            _, token = await bot.command("/resume", link, ALICE)
            [resumed] = await bot.responses_for(token)
            home = json.dumps(await open_home(bot, ALICE), ensure_ascii=False)
            admin_home = json.dumps(await open_home(bot, ADMIN), ensure_ascii=False)

    assert "• set aside: 1" in status["text"]
    assert f"|{bot.key(top.ts)}> · set aside · last activity" in listing["text"]
    assert "was set aside; send a new message to start over" in resumed["text"]
    assert f"|Thread {top.ts}> · last activity" in home
    assert "· set aside (send a new message to start over)" in home
    assert "set aside: 1" in admin_home
    for shown in (status["text"], listing["text"], resumed["text"], home, admin_home):
        assert "restart" not in shown and "needs_restart" not in shown
