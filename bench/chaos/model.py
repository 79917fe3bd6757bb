"""A rule-based stand-in for OpenAI's `POST /v1/responses` (JSON, or server-sent events with
`stream: true`), served on loopback for the real `OpenAIResponsesModel`. It answers from the
request's input items alone, so any replica, before or after a crash, gets the same kind of
answer:

- the conversation since the last assistant message holds tool requests without a call yet
  (`transfer 5 to bob #tag`, `note some text #tag`, `lookup topic #tag`, `charge 5 #tag`,
  `pay 5 to bob #tag`, `claim 5 for bob #tag`, `wire 5 to bob #tag`): one function call per
  request, each with a fresh call id (`call_<tag>_<n>`), as real models invent new ids;
- otherwise: the final answer, quoting every `#tag` of that stretch, each call's fate as its
  output tells it (ran, failed, unknown, rejected, not_run), and a response id of its own.

The agent is told by the request's instructions (see `bench.chaos.agent`): `chaos` asks the
clerk (an agent used as a tool) about claims and hands wires off to `payments` (a handoff,
alone in its turn, once the turn's other calls are answered); `payments` wires, `clerk`
files claims, each answering with the fates of its calls.

A request whose newest item is a user message saying `(ponder 2.0s)` is answered that much
later (a run that holds its thread while replies arrive). Every tag the model was given is
remembered, with when it was first given (`given`).

A request saying `(slow)` makes a call whose tool answers only after its client gave up
waiting: `pay`'s recipient says `slow` (the MCP server then takes longer than the client's
read timeout), a `charge`'s call id is noted in `slow_calls` (the keyed service answers it
late). A wire that asks to `reveal` it gets an answer from `payments` that says
`CLASSIFIED` (`MARKER`), which its output guardrail withholds (once: the runs after it, which
find it in the history, are answered plainly). Told that a `pay` failed and
to try again, the model pays again, once, as a real one would (`An error occurred ...
Please try again.` was what a call past the MCP client's read timeout used to get).

A request whose newest message says `(flaky)` gets an HTTP 500 the first time its tag is
asked (the replicas of such a run do not retry a model call: the run is interrupted).

Replicas send to `/<process>/v1/responses` (`bench.chaos.processes`: one name per process
started): each request is logged with how many of that process's requests were open then,
their connections not closed (`at_once`), what a replica's `BOT_MAX_RUNS` bounds.

Faults: HTTP 500 for the next requests, latency, a hang until healed (or for a while), and a
connection dropped after a delay (what a client timeout looks like)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from testkit.responses import message, tool_call

TAG = re.compile(r"#([a-z0-9]+)")
THREAD_CONTEXT = "Earlier messages in this Slack thread"  # how the bot's thread context starts
HANDOFF = "transfer_to_payments"  # the handoff() tool to the payments agent
PONDER = re.compile(r"\(ponder (\d+(?:\.\d+)?)s\)")
REQUESTS = (
    ("transfer", re.compile(r"\btransfer (\d+) to (\w+)")),
    ("send_note", re.compile(r"\bnote (.+?) #")),
    ("lookup", re.compile(r"\blookup (\w+)")),
    ("pay", re.compile(r"\bpay (\d+) to (\w+)")),
    ("charge", re.compile(r"\bcharge (\d+)")),
    ("ask_clerk", re.compile(r"\bclaim (\d+) for (\w+)")),
    (HANDOFF, re.compile(r"\bwire (\d+) to (\w+)")),
)
AGENT_REQUESTS = {  # the agents a run reaches, by the start of their instructions
    "payments:": (("wire", re.compile(r"\bwire (\d+) to (\w+)")),),
    "clerk:": (("file_claim", re.compile(r"\bclaim (\d+) for (\w+)")),),
}
STOP_SAID = re.compile(r"^<@([A-Z0-9]+)>(?: \([^()\n]*\))?: (?:stop|stop it|cancel that|abort)$")
PAY_REF = re.compile(r" ref (call_[a-z0-9]+_\d+)$")  # `pay`'s recipient names its call
SLOW = "(slow)"  # (`bench.chaos.shapes.SLOW`)
FLAKY = "(flaky)"  # (`bench.chaos.shapes.FLAKY`)
REVEAL = re.compile(r"\breveal\b")
MARKER = "CLASSIFIED"  # in an answer `payments`' output guardrail withholds
TRY_AGAIN = "try again"
ANSWER = re.compile(r"\[resp (\d+)\]")
CALL_FATE = re.compile(r"(call_[a-z0-9]+_\d+)=(\w+)")
USAGE = {
    "input_tokens": 10,
    "output_tokens": 5,
    "total_tokens": 15,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens_details": {"reasoning_tokens": 0},
}
ModelFaultKind = Literal["error500", "delay", "hang", "drop"]
Watcher = Callable[[str, str, set[str]], None]  # (what, agent, tags): "request", "answer"


def output_fate(output: str) -> str:
    """What a function_call_output says happened to the call."""
    if output.startswith("ok:"):
        return "ran"
    if "outcome of this call is unknown" in output:
        return "unknown"
    if "not approved" in output:
        return "rejected"
    if output.startswith("Not run"):
        return "not_run"
    if "error" in output.lower():
        return "failed"
    if output.startswith("paid ") or '"text":"paid ' in output.replace(" ", ""):
        return "ran"  # the MCP server's `pay`
    return "other"


def content_text(content: Any) -> str:
    """The text of a message's content or a call's output (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    if isinstance(content, dict):  # one output part (an MCP tool's text)
        return str(content.get("text", ""))
    return ""


@dataclass
class ModelFault:
    kind: ModelFaultKind
    times: int | None = None
    until: float | None = None  # time.monotonic() deadline
    latency: float = 0.0
    hits: int = 0

    def live(self, now: float) -> bool:
        return (self.times is None or self.hits < self.times) and (
            self.until is None or now < self.until
        )


@dataclass
class CallMade:
    call_id: str
    tool: str
    tag: str
    arguments: dict[str, Any]
    at: float


@dataclass
class ModelServer:
    """Decides, records and misbehaves. `calls` maps every call id it invented to its tool,
    tag and arguments; `log` is one entry per request."""

    faults: list[ModelFault] = field(default_factory=list)
    calls: dict[str, CallMade] = field(default_factory=dict)
    slow_calls: set[str] = field(default_factory=set)  # `charge` calls the service answers late
    revealed: set[str] = field(default_factory=set)  # requests answered with `MARKER` once
    log: list[dict[str, Any]] = field(default_factory=list)
    given: dict[str, float] = field(default_factory=dict)  # tag -> when first given
    # A stop word someone said, given to the model as a message: (user, the threads of the
    # request's tags (`s<seed>t<thread>`), when), for every request that carries it.
    stops_given: list[tuple[str, frozenset[str], float]] = field(default_factory=list)
    watchers: list[Watcher] = field(default_factory=list)  # told of requests and answers
    in_flight: int = 0
    last_request: float = 0.0
    flaked: set[str] = field(default_factory=set)  # tags of `(flaky)` requests failed once
    open_requests: dict[str, list[web.Request]] = field(default_factory=dict)  # by process
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _healed: asyncio.Event = field(default_factory=asyncio.Event)

    # -- faults -------------------------------------------------------------------------

    def inject(
        self,
        kind: ModelFaultKind,
        *,
        times: int | None = None,
        seconds: float | None = None,
        latency: float = 0.0,
    ) -> ModelFault:
        fault = ModelFault(
            kind, times, None if seconds is None else time.monotonic() + seconds, latency
        )
        self._healed.clear()
        self.faults.append(fault)
        return fault

    def heal(self) -> None:
        """No more faults, and every hung request is answered now."""
        self.faults.clear()
        self._healed.set()

    def _choose(self) -> ModelFault | None:
        now = time.monotonic()
        self.faults = [f for f in self.faults if f.live(now)]
        for fault in self.faults:
            fault.hits += 1
            return fault
        return None

    # -- deciding -----------------------------------------------------------------------

    def decide(self, items: list[dict[str, Any]], instructions: str = "") -> list[dict[str, Any]]:
        """The output items for an input: function calls, or the final answer."""
        agent = agent_of(instructions)
        start = 0
        for index, item in enumerate(items):
            if item.get("role") == "assistant":
                start = index + 1
        stretch = items[start:]
        # The thread's earlier messages (a conversation that starts inside a thread, after
        # an expiry) are context: nothing in them is asked again or answered again.
        texts = [
            content_text(i.get("content"))
            for i in stretch
            if i.get("role") == "user" and not _thread_context(i)
        ]
        requests = AGENT_REQUESTS.get(agent, REQUESTS)
        mine = {tool for tool, _ in requests}
        called = {
            _tag_of_call(str(i.get("call_id", "")))
            for i in stretch
            if i.get("type") == "function_call" and (agent == "chaos:" or i.get("name") in mine)
        }
        calls: list[tuple[str, str, tuple[Any, ...], str]] = []
        if agent == "chaos:":
            calls += _paid_again(stretch)
            called |= {call[1] for call in calls}
        for text in texts:
            tags = TAG.findall(text)
            if not tags or tags[0] in called:
                continue
            for tool, pattern in requests:
                match = pattern.search(text)
                if match:
                    calls.append((tool, tags[0], match.groups(), _request_text(text)))
                    called.add(tags[0])
                    break
        # A handoff goes alone, once the turn's other calls are answered.
        others = [c for c in calls if c[0] != HANDOFF]
        chosen = others or calls[:1]
        if chosen:
            return [self._call(*call) for call in chosen]
        outputs = {
            str(i.get("call_id")): content_text(i.get("output"))
            for i in stretch
            if i.get("type") == "function_call_output"
        }
        fates = [
            f"{i['call_id']}={output_fate(outputs.get(str(i['call_id']), ''))}"
            for i in stretch
            if i.get("type") == "function_call"
        ]
        if agent == "clerk:":  # the clerk's answer is the output of the outer call
            return [_message(f"clerk: {' '.join(fates) or 'nothing filed'}")]
        tags = [f"#{tag}" for text in texts for tag in TAG.findall(text)]
        words = " ".join(tags) or "(no tag)"
        detail = f" | {' '.join(fates)}" if fates else ""
        told = ""
        if agent == "payments:":  # each request to reveal is answered so once (it is withheld)
            asked = {t for text in texts if REVEAL.search(text) for t in TAG.findall(text)[:1]}
            if asked - self.revealed:
                told = f" {MARKER}"
                self.revealed |= asked
        return [_message(f"answer {words}{detail}{told} [resp {next(self._ids)}]")]

    def _call(
        self, tool: str, tag: str, groups: tuple[str | Any, ...], text: str
    ) -> dict[str, Any]:
        call_id = f"call_{tag}_{next(self._ids)}"
        arguments: dict[str, Any]
        if tool in ("transfer", "wire", "file_claim"):
            arguments = {"amount": int(groups[0]), "to": groups[1]}
        elif tool == "pay":  # the MCP server records only its arguments: they name the call
            slow = " slow" if SLOW in text else ""
            arguments = {"amount": int(groups[0]), "to": f"{groups[1]}{slow} ref {call_id}"}
        elif tool == "charge":
            arguments = {"amount": int(groups[0])}
            if SLOW in text:
                self.slow_calls.add(call_id)
        elif tool == "send_note":
            arguments = {"text": groups[0]}
        elif tool == "ask_clerk":
            arguments = {"input": text}
        elif tool == HANDOFF:
            arguments = {}
        else:
            arguments = {"topic": groups[0]}
        self.calls[call_id] = CallMade(call_id, tool, tag, arguments, time.time())
        return {**tool_call(tool, arguments, call_id), "id": f"fc_{call_id}"}

    def _watch(self, what: str, agent: str, items: list[dict[str, Any]]) -> None:
        tags = {
            tag
            for i in items
            if i.get("role") == "user"
            for tag in TAG.findall(content_text(i.get("content")))
        }
        for watcher in list(self.watchers):
            watcher(what, agent, tags)

    def note_given(self, items: list[dict[str, Any]], at: float) -> None:
        """Remember each tag given (first time), and each stop word given as a message."""
        users = [i for i in items if i.get("role") == "user" and not _thread_context(i)]
        # The thread a stop word was said in, by the tags of the request (those of a fresh
        # conversation's thread context too: a `stop` may be all it was given).
        tags = frozenset(
            t.rsplit("m", 1)[0]
            for i in items
            if i.get("role") == "user"
            for t in TAG.findall(content_text(i.get("content")))
        )
        for item in users:
            text = content_text(item.get("content"))
            for tag in TAG.findall(text):
                self.given.setdefault(tag, at)
            said = STOP_SAID.match(text.strip())
            if said:
                self.stops_given.append((said.group(1), tags, at))

    # -- serving ------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/responses", self._responses),
            web.post("/{process}/v1/responses", self._responses),
        ]

    def _opened(self, process: str, request: web.Request) -> int:
        """The process's requests open now, this one included: those whose connection the
        process has not closed (a request it gave up on, or of a run it cancelled, may
        still be waited on here)."""
        live = [
            r
            for r in self.open_requests.get(process, [])
            if r.transport is not None and not r.transport.is_closing()
        ]
        self.open_requests[process] = [*live, request]
        return len(live) + 1

    def _closed(self, process: str, request: web.Request) -> None:
        with contextlib.suppress(ValueError):
            self.open_requests.get(process, []).remove(request)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.in_flight += 1
        self.last_request = time.monotonic()
        entry: dict[str, Any] = {"at": time.time(), "stream": bool(body.get("stream"))}
        process = request.match_info.get("process")
        if process is not None:
            entry["process"] = process
            entry["at_once"] = self._opened(process, request)
        self.log.append(entry)
        try:
            fault = self._choose()
            if fault is not None:
                entry["fault"] = fault.kind
                if fault.latency > 0:
                    await _sleep_unless(self._healed, fault.latency)
                if fault.kind == "error500":
                    return web.json_response(
                        {"error": {"message": "chaos: server error", "type": "server_error"}},
                        status=500,
                    )
                if fault.kind == "drop":
                    if request.transport is not None:
                        request.transport.close()
                    return web.Response(status=500)
                if fault.kind == "hang":
                    left = None if fault.until is None else fault.until - time.monotonic()
                    await _sleep_unless(self._healed, left)
            items = body.get("input")
            if isinstance(items, str):
                items = [{"role": "user", "content": items}]
            items = [i for i in items or [] if isinstance(i, dict)]
            entry["input"] = [_brief(i) for i in items[-6:]]
            instructions = str(body.get("instructions") or "")
            agent = agent_of(instructions)
            entry["agent"] = agent
            newest = items[-1] if items else {}
            flaky = _flaky_tag(newest)
            if flaky is not None and flaky not in self.flaked:  # as a 500 fault: not given
                self.flaked.add(flaky)
                entry["fault"] = "flaky"
                return web.json_response(
                    {"error": {"message": "chaos: flaky", "type": "server_error"}}, status=500
                )
            self.note_given(items, entry["at"])
            self._watch("request", agent, items)
            ponder = PONDER.search(content_text(newest.get("content")))
            if newest.get("role") == "user" and ponder:
                entry["ponder"] = float(ponder.group(1))
                await asyncio.sleep(float(ponder.group(1)))
            output = self.decide(items, instructions)
            entry["output"] = [o.get("call_id") or content_text(o.get("content")) for o in output]
            if agent != "clerk:" and all(o.get("type") == "message" for o in output):
                self._watch("answer", agent, items)
            if body.get("stream"):
                try:
                    return await _stream(request, body, output)
                except ConnectionResetError:  # the bot went away (killed, cancelled)
                    entry["client_gone"] = True
                    return web.Response(status=499)
            return web.json_response(_response(body, output, "completed"))
        finally:
            if process is not None:
                self._closed(process, request)
            self.in_flight -= 1
            self.last_request = time.monotonic()


def _paid_again(stretch: list[dict[str, Any]]) -> list[tuple[str, str, tuple[Any, ...], str]]:
    """A `pay` the model was told failed and to try again is paid again, once (a second
    `pay` of the same request: its tag)."""
    outputs = {
        str(i.get("call_id")): content_text(i.get("output"))
        for i in stretch
        if i.get("type") == "function_call_output"
    }
    paid: dict[str, list[dict[str, Any]]] = {}
    for item in stretch:
        if item.get("type") == "function_call" and item.get("name") == "pay":
            paid.setdefault(_tag_of_call(str(item.get("call_id", ""))), []).append(item)
    again = []
    for tag, calls in paid.items():
        first = calls[0]
        if len(calls) == 1 and TRY_AGAIN in outputs.get(str(first.get("call_id")), "").lower():
            arguments = json.loads(str(first.get("arguments") or "{}"))
            recipient = PAY_REF.sub("", str(arguments.get("to", ""))).split(" ")[0]
            slow = f" {SLOW}" if " slow ref " in str(arguments.get("to", "")) else ""
            text = f"pay {arguments.get('amount')} to {recipient}{slow}"
            again.append(("pay", tag, (str(arguments.get("amount")), recipient), text))
    return again


def _flaky_tag(item: dict[str, Any]) -> str | None:
    """The tag of a person's message that says `(flaky)`."""
    text = content_text(item.get("content")) if item.get("role") == "user" else ""
    tags = TAG.findall(text) if FLAKY in text else []
    return tags[0] if tags else None


def agent_of(instructions: str) -> str:
    """`chaos:`, `payments:` or `clerk:`, by how the agent's instructions start."""
    for agent in AGENT_REQUESTS:
        if instructions.startswith(agent):
            return agent
    return "chaos:"


def _request_text(text: str) -> str:
    """A user message's own text, without its author header (`<@U1>: `)."""
    return re.sub(r"^<@[A-Z0-9]+>(?: \([^()\n]*\))?: ", "", text)


async def _sleep_unless(healed: asyncio.Event, seconds: float | None) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(healed.wait(), seconds)


def _brief(item: dict[str, Any]) -> str:
    """An input item in a few words, for the run's history."""
    if item.get("type") in ("function_call", "function_call_output"):
        return f"{item['type']} {item.get('call_id')}"
    return f"{item.get('role')}: {content_text(item.get('content'))[:60]}"


def _thread_context(item: dict[str, Any]) -> bool:
    """The thread's earlier messages, read for a conversation that starts inside a thread:
    what people said there, not messages given to this conversation."""
    return content_text(item.get("content")).startswith(THREAD_CONTEXT)


def _tag_of_call(call_id: str) -> str:
    parts = call_id.split("_")
    return parts[1] if len(parts) == 3 and parts[0] == "call" else ""


def _message(text: str) -> dict[str, Any]:
    """testkit's assistant message, its id from its text (the same answer, the same id)."""
    return {**message(text), "id": f"msg_{abs(hash(text)) % 10**12}"}


def _response(request: dict[str, Any], output: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "id": f"resp_{time.monotonic_ns()}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": request.get("model", "chaos"),
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": USAGE if status == "completed" else None,
    }


async def _stream(
    request: web.Request, body: dict[str, Any], output: list[dict[str, Any]]
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response(body, [], "in_progress")}
    ]
    for index, item in enumerate(output):
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": _response(body, output, "completed")})
    for number, event in enumerate(events):
        event["sequence_number"] = number
        await response.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
    await response.write_eof()
    return response
