"""MCP servers managed by the runtime, with a real MCP server (`testkit.mcp_server`) in its
own process: its tools are guarded like function tools (a server's `require_approval` is our
approval request; a retry-safe tool runs without a pause), a restart decides from the
checkpoint alone with a new server process, the tool listings are part of the fingerprint
(a changed schema sets a paused run aside), and a server that drops pauses the runs that
need it until it is back."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from agents.testing import ScriptedModel, assistant_message, function_call

from bot.runtime import (
    Answer,
    ApprovalRequest,
    ConversationRuntime,
    Decided,
    Notice,
    NoticeKind,
    idempotent,
)
from bot.runtime.fingerprint import agent_fingerprint
from bot.settings import RuntimeSettings
from storage import ConversationKey, Status, Store, ToolCallStatus
from testkit.mcp_agent import payments_agent, payments_http, payments_stdio
from testkit.runtime import KEY, SideEffects, decide, record_of, running
from testkit.services import free_port, wait_until
from tests.conftest import Backend

OTHER = ConversationKey(team="T9", channel="C9", thread_ts="1700000200.000200")


def pay_requests(outcomes: list[Any]) -> ApprovalRequest:
    [request] = [o for o in outcomes if isinstance(o, ApprovalRequest)]
    return request


async def test_an_mcp_servers_tools_are_guarded_and_in_the_fingerprint(
    store: Store, tmp_path: Path
) -> None:
    effects = SideEffects(tmp_path / "mcp-effects.jsonl")
    env = {"MCP_EFFECTS_FILE": str(effects.path)}
    model = ScriptedModel(
        [
            [function_call("balance", {"account": "bob"}, call_id="c-bal")],
            [function_call("pay", {"amount": 5, "to": "bob"}, call_id="c-pay")],
            [assistant_message("Paid 5 to bob.")],
            [function_call("pay", {"amount": 7, "to": "ann"}, call_id="c-7")],
        ]
    )
    agent = payments_agent(payments_stdio(**env), model)
    async with running(ConversationRuntime(store, agent)) as rt:  # not started: on first use
        first = await rt.handle_message(KEY, event_id="E1", user="U1", text="pay bob 5")
        assert [c.tool_name for c in pay_requests(first).calls] == ["pay"]
        listed = rt.parts.fingerprint
    assert [e["tool"] for e in effects.calls()] == ["balance"]  # read-only: no pause, ran
    assert store.get_tool_call(KEY, "c-bal") is None  # retry-safe: outside the ledger
    assert record_of(store).status is Status.AWAITING_APPROVAL
    assert listed != agent_fingerprint(agent)  # the listing is part of it

    # A restart: another agent, runtime and server process decide from the checkpoint.
    restarted = payments_agent(payments_stdio(**env), model)
    async with running(ConversationRuntime(store, restarted)) as again:
        await again.start()
        assert again.parts.fingerprint == listed
        done = await decide(again, pay_requests(first), "c-pay")
        assert [type(o) for o in done] == [Decided, Answer]
        assert Answer(key=KEY, text="Paid 5 to bob.") in done
        paused = await again.handle_message(OTHER, event_id="E2", user="U1", text="pay ann 7")
    assert [(e["tool"], e.get("amount")) for e in effects.calls()] == [
        ("balance", None),
        ("pay", 5),
    ]
    call = store.get_tool_call(KEY, "c-pay")
    assert call is not None and call.status is ToolCallStatus.COMPLETED
    assert "paid 5 to bob" in (call.output or "")

    # The server now lists `pay` with another schema: the paused run is set aside.
    changed = payments_agent(payments_stdio(MCP_PAY_CURRENCY="1", **env), ScriptedModel([]))
    async with running(ConversationRuntime(store, changed)) as upgraded:
        await upgraded.start()
        assert upgraded.parts.fingerprint != listed
        outcomes = await decide(upgraded, pay_requests(paused), "c-7", key=OTHER)
    [notice] = [o for o in outcomes if isinstance(o, Notice)]
    assert notice.kind is NoticeKind.STATE_INCOMPATIBLE and "agent changed" in notice.text
    assert [e.get("amount") for e in effects.calls("pay")] == [5]  # 7 never ran
    assert record_of(store, OTHER).status is Status.SET_ASIDE


@contextmanager
def http_server(port: int, effects: SideEffects) -> Iterator[subprocess.Popen[bytes]]:
    """The test MCP server over streamable HTTP on `port`, ready."""
    process = subprocess.Popen(
        [sys.executable, "-m", "testkit.mcp_server", "--http", str(port)],
        env={**os.environ, "MCP_EFFECTS_FILE": str(effects.path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, "the MCP server did not start"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MCP server never listened"
                time.sleep(0.05)
        yield process
    finally:
        process.terminate()
        process.wait(10)


class Sink:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def __call__(self, outcome: Any, *_: Any) -> None:
        self.sent.append(outcome)


async def answered(sink: Sink, text: str, within: float = 30) -> float:
    """Seconds until the thread is sent the answer `text`."""
    started = time.monotonic()
    while (
        Answer(key=KEY, text=text) not in sink.sent
        and Answer(key=OTHER, text=text) not in sink.sent
    ):
        assert time.monotonic() - started < within, sink.sent
        await asyncio.sleep(0.05)
    return time.monotonic() - started


@pytest.mark.parametrize("backend", ["local"], indirect=True)  # the runtime's side: one
async def test_a_server_that_drops_pauses_the_run_until_it_is_back(
    store: Store, tmp_path: Path
) -> None:
    """Streamable HTTP: the server stops; a message that needs it, and then a click on an
    approval it asked for, each pause the run as interrupted with a plain notice, and are not
    lost; once the server listens again the watcher reconnects it and each thread continues
    by itself."""
    effects = SideEffects(tmp_path / "mcp-effects.jsonl")
    port = free_port()
    model = ScriptedModel(
        [
            [function_call("balance", {"account": "bob"}, call_id="c-1")],
            [assistant_message("Bob has 100.")],
            [function_call("pay", {"amount": 3, "to": "cy"}, call_id="c-pay")],
            [assistant_message("Paid 3 to cy.")],
        ]
    )
    agent = payments_agent(payments_http(f"http://127.0.0.1:{port}/mcp"), model)
    sink = Sink()
    settings = RuntimeSettings(mcp_check_interval=0.2)
    async with running(ConversationRuntime(store, agent, settings, on_outcome=sink)) as rt:
        with http_server(port, effects):
            await rt.start()
            assert rt.mcp.down() == []
        await asyncio.sleep(0.5)  # the watcher's ping finds it gone
        outcomes = await rt.handle_message(KEY, event_id="E1", user="U1", text="bob's balance?")
        [notice] = [o for o in outcomes if isinstance(o, Notice)]
        assert notice.kind is NoticeKind.TOOLS_UNAVAILABLE
        assert "`payments` tools are unavailable" in notice.text
        assert record_of(store).status is Status.INTERRUPTED
        assert [e.event_id for e in store.read_inbox(KEY)] == ["E1"]  # kept for the run
        assert len(model.calls) == 0 and effects.calls() == []
        with http_server(port, effects):
            first_back = await answered(sink, "Bob has 100.")
            asked = await rt.handle_message(OTHER, event_id="E2", user="U1", text="pay cy 3")
        await asyncio.sleep(0.5)  # the watcher's ping finds it gone
        decided = await decide(rt, pay_requests(asked), "c-pay", key=OTHER)
        assert [o.kind for o in decided if isinstance(o, Notice)] == [NoticeKind.TOOLS_UNAVAILABLE]
        assert record_of(store, OTHER).status is Status.INTERRUPTED
        assert len(store.read_inbox(OTHER)) == 1  # the decision, kept
        with http_server(port, effects):
            second_back = await answered(sink, "Paid 3 to cy.")
    assert [(e["tool"], e.get("amount")) for e in effects.calls()] == [
        ("balance", None),
        ("pay", 3),
    ]
    for key in (KEY, OTHER):
        assert record_of(store, key).status is Status.IDLE and store.read_inbox(key) == []
    assert first_back < 15 and second_back < 15, (first_back, second_back)


@pytest.mark.parametrize("backend", ["local"], indirect=True)
async def test_a_side_effect_whose_server_dies_mid_call_is_of_unknown_outcome(
    store: Store, tmp_path: Path
) -> None:
    """`pay` has had its effect when its stdio server dies: the call stays `started`, the
    thread and the model are told its outcome is unknown, and the run goes on with a new
    server process (started when the next turn lists the tools)."""
    effects = SideEffects(tmp_path / "mcp-effects.jsonl")
    pids = tmp_path / "mcp-pids"
    server = payments_stdio(
        MCP_EFFECTS_FILE=str(effects.path), MCP_PIDS_FILE=str(pids), MCP_PAY_SECONDS="30"
    )
    model = ScriptedModel(
        [
            [function_call("pay", {"amount": 9, "to": "di"}, call_id="c-9")],
            [assistant_message("I can't tell whether di was paid.")],
        ]
    )
    async with running(ConversationRuntime(store, payments_agent(server, model))) as rt:
        asked = await rt.handle_message(KEY, event_id="E1", user="U1", text="pay di 9")
        deciding = asyncio.create_task(decide(rt, pay_requests(asked), "c-9"))
        await asyncio.to_thread(wait_until, lambda: effects.calls("pay"), 30)
        os.kill(int(pids.read_text().split()[0]), signal.SIGKILL)
        done = await asyncio.wait_for(deciding, 60)
    [notice] = [o for o in done if isinstance(o, Notice)]
    assert notice.kind is NoticeKind.TOOL_OUTCOME_UNKNOWN
    assert "`pay` (call c-9)" in notice.text and "stopped answering" in notice.text
    assert Answer(key=KEY, text="I can't tell whether di was paid.") in done
    outputs = [item for item in model.calls[-1].input if isinstance(item, dict)]
    assert any("outcome of this call is unknown" in str(i.get("output")) for i in outputs)
    call = store.get_tool_call(KEY, "c-9")
    assert call is not None and call.status is ToolCallStatus.STARTED
    assert len(effects.calls("pay")) == 1 and len(pids.read_text().split()) == 2


async def test_a_keyed_mcp_call_cut_short_is_sent_again_with_its_key(
    backend: Backend, tmp_path: Path
) -> None:
    """`idempotent(server, "charge", key_argument="idempotency_key")`: the tool receives the
    call's key in that argument; cut short after the server applied it (the process dies),
    the next process sends it again with the same key and the server applies it once."""
    effects = SideEffects(tmp_path / "mcp-effects.jsonl")
    env = {
        "MCP_EFFECTS_FILE": str(effects.path),
        "MCP_KEYS_FILE": str(tmp_path / "keys.jsonl"),
        "MCP_PAY_SECONDS": "60",
    }
    model = ScriptedModel(
        [
            [function_call("charge", {"amount": 3, "to": "bob"}, call_id="c-charge")],
            [assistant_message("Charged.")],
        ]
    )

    def agent() -> Any:
        server = payments_stdio(**env)
        return payments_agent(idempotent(server, "charge", key_argument="idempotency_key"), model)

    first = ConversationRuntime(backend.open(lease_seconds=1, lease_skew_seconds=0), agent())
    serving = asyncio.create_task(
        first.handle_message(KEY, event_id="E1", user="U1", text="charge bob 3")
    )
    await asyncio.to_thread(wait_until, lambda: effects.calls("charge"), 60)
    serving.cancel()  # the process dies while the server holds the call
    await asyncio.gather(serving, return_exceptions=True)
    await first.close()
    async with running(ConversationRuntime(backend.open(), agent())) as again:
        outcomes = await again.recover()
    assert [e["key"] for e in effects.calls("charge")] == [effects.calls("charge")[0]["key"]]
    assert Answer(key=KEY, text="Charged.") in outcomes
    assert NoticeKind.TOOL_COMPLETED_AFTER_RESTART in [
        o.kind for o in outcomes if isinstance(o, Notice)
    ]
    call = backend.open().get_tool_call(KEY, "c-charge")
    assert call is not None and call.status is ToolCallStatus.COMPLETED and call.attempts == 2
    assert call.output is not None and "charged 3 to bob" in call.output


async def test_an_mcp_call_past_the_clients_read_timeout_is_of_unknown_outcome(
    backend: Backend, tmp_path: Path
) -> None:
    """The MCP client's read timeout (`client_session_timeout_seconds`, 1 s here) passes
    while the server holds `pay`, whose effect happened: no answer is not a failure. The
    call stays `started`, the model and the thread are told its outcome is unknown, it is
    not sent again, and the server, slow rather than gone, stays connected."""
    effects = SideEffects(tmp_path / "mcp-effects.jsonl")
    server = payments_stdio(1, MCP_EFFECTS_FILE=str(effects.path), MCP_PAY_SECONDS="5")
    model = ScriptedModel(
        [
            [function_call("pay", {"amount": 4, "to": "eve"}, call_id="c-4")],
            [assistant_message("I can't tell whether eve was paid.")],
        ]
    )
    async with running(ConversationRuntime(backend.open(), payments_agent(server, model))) as rt:
        asked = await rt.handle_message(KEY, event_id="E1", user="U1", text="pay eve 4")
        done = await decide(rt, pay_requests(asked), "c-4")
        assert rt.mcp.down() == []
    [notice] = [o for o in done if isinstance(o, Notice)]
    assert notice.kind is NoticeKind.TOOL_OUTCOME_UNKNOWN
    assert "`pay` (call c-4) was sent to the `payments` tools, which did not answer in time" in (
        notice.text
    )
    outputs = [str(i.get("output")) for i in model.calls[-1].input if isinstance(i, dict)]
    assert any("outcome of this call is unknown" in output for output in outputs)
    assert not any("try again" in output for output in outputs)
    call = backend.open().get_tool_call(KEY, "c-4")
    assert call is not None and call.status is ToolCallStatus.STARTED
    assert [(e["amount"], e["to"]) for e in effects.calls("pay")] == [(4, "eve")]


async def test_a_keyed_mcp_call_past_the_read_timeout_is_sent_again_with_its_key(
    backend: Backend, tmp_path: Path
) -> None:
    """The same timeout on a keyed tool (`idempotent(server, "charge", key_argument=...)`):
    the call is sent again at once with the same key, the server answers the repeat with
    the first result, and the call is done, applied once."""
    effects = SideEffects(tmp_path / "mcp-effects.jsonl")
    env = {
        "MCP_EFFECTS_FILE": str(effects.path),
        "MCP_KEYS_FILE": str(tmp_path / "keys.jsonl"),
        "MCP_PAY_SECONDS": "5",
    }
    server = idempotent(payments_stdio(1, **env), "charge", key_argument="idempotency_key")
    model = ScriptedModel(
        [
            [function_call("charge", {"amount": 3, "to": "bob"}, call_id="c-charge")],
            [assistant_message("Charged.")],
        ]
    )
    async with running(ConversationRuntime(backend.open(), payments_agent(server, model))) as rt:
        outcomes = await rt.handle_message(KEY, event_id="E1", user="U1", text="charge bob 3")
    assert Answer(key=KEY, text="Charged.") in outcomes
    assert [o for o in outcomes if isinstance(o, Notice)] == []
    assert len(effects.calls("charge")) == 1
    call = backend.open().get_tool_call(KEY, "c-charge")
    assert call is not None and call.status is ToolCallStatus.COMPLETED and call.attempts == 2
    assert call.output is not None and "charged 3 to bob" in call.output
