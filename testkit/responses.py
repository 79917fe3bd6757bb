"""A scripted stand-in for OpenAI's `POST /v1/responses`, on loopback, so that the real
`OpenAIResponsesModel` (and the real openai client) is exercised end to end. Answers JSON,
or server-sent events when the request asks for `stream: true`: a message's text then
arrives word by word (`response.output_text.delta`), `delta_delay` seconds apart, and a
request listed in `midway` stops halfway through its text until its event is set (a model
that is mid-answer when the process dies). With `respond`, requests past the script are
answered by it, from what they carry; `RespondingResponses` answers every request that way
(for runs on many threads at once, in an order nobody scripted). A `failures` 429 says
`Retry-After: 1`, as the service's rate limit does.

It refuses what the real API refuses, with the real API's error bodies (HTTP 400,
`invalid_request_error`): a `function_call_output` whose `function_call` is not in the same
input, and, given a `window` (in characters), a request whose input and instructions are
longer than that (`context_length_exceeded`). A refused request uses up nothing of the
script; it is kept in `refused`."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

from testkit.runtime import last_user_text
from testkit.runtime import user_texts as call_user_texts

USAGE = {
    "input_tokens": 10,
    "output_tokens": 5,
    "total_tokens": 15,
    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
    "output_tokens_details": {"reasoning_tokens": 0},
}
_ids = itertools.count(1)
TOO_LARGE = {
    "message": "Your input exceeds the context window of this model. Please adjust your input "
    "and try again.",
    "type": "invalid_request_error",
    "param": "input",
    "code": "context_length_exceeded",
}


def request_size(request: dict[str, Any]) -> int:
    """What a request's window holds, in characters: its input (as compact JSON) and its
    instructions."""
    given = json.dumps(request.get("input"), ensure_ascii=False, separators=(",", ":"))
    return len(given) + len(request.get("instructions") or "")


def refusal(request: dict[str, Any], window: int | None) -> dict[str, Any] | None:
    """The API's error for a request it refuses as it stands, or None."""
    items = items_of(request)
    called = {i.get("call_id") for i in items if i.get("type") == "function_call"}
    for item in items:
        if item.get("type") == "function_call_output" and item.get("call_id") not in called:
            return {
                "message": "No tool call found for function call output with call_id "
                f"{item.get('call_id')}.",
                "type": "invalid_request_error",
                "param": "input",
                "code": None,
            }
    if window is not None and request_size(request) > window:
        return TOO_LARGE
    return None


def message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{next(_ids)}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def tool_call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{next(_ids)}",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


class ScriptedResponses:
    def __init__(
        self,
        script: list[list[dict[str, Any]]],
        holds: dict[int, threading.Event] | None = None,
        *,
        delta_delay: float = 0.0,
        midway: dict[int, threading.Event] | None = None,
        failures: list[int] | None = None,
        respond: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None,
        window: int | None = None,
    ) -> None:
        self.script = list(script)
        self.window = window  # characters of input and instructions a request may carry
        self.refused: list[dict[str, Any]] = []  # requests answered 400 (see `refusal`)
        self.respond = respond  # answers each request once the script is used up
        self.failures = list(failures or [])  # HTTP statuses answered first, in order
        self.failed: list[int] = []  # the failures answered
        self.holds = holds or {}  # request number (0-based) -> answer only once this is set
        self.delta_delay = delta_delay
        self.midway = midway or {}  # request number -> finish its text only once this is set
        self.first_delta_at: dict[int, float] = {}  # request number -> time.monotonic()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()

    def next_output(self, request: dict[str, Any], headers: dict[str, str]) -> list[dict[str, Any]]:
        with self.lock:
            self.requests.append(request)
            self.headers.append(headers)
            number = len(self.requests) - 1
            if not self.script and self.respond is None:
                raise RuntimeError("the script is exhausted")
            output = self.script.pop(0) if self.script else None
        if output is None:
            assert self.respond is not None
            output = self.respond(request)
        hold = self.holds.get(number)
        if hold is not None:
            hold.wait(120)
        return output

    def failure(self) -> int | None:
        """The status to answer this request with instead of the script, if any."""
        with self.lock:
            if not self.failures:
                return None
            self.failed.append(self.failures.pop(0))
            return self.failed[-1]

    def number_of(self, request: dict[str, Any]) -> int:
        with self.lock:
            return next(i for i, r in enumerate(self.requests) if r is request)


class RespondingResponses(ScriptedResponses):
    """Each request answered by `respond(request)`, with no script (called on the server's
    thread for that request, outside the lock, so it may block to stand for a slow model)."""

    def __init__(
        self, respond: Callable[[dict[str, Any]], list[dict[str, Any]]], **options: Any
    ) -> None:
        super().__init__([], respond=respond, **options)


def items_of(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The input items a request to the model carries (a bare string is one user message)."""
    given = request.get("input")
    if not isinstance(given, list):
        return [{"role": "user", "content": str(given or "")}]
    return [item for item in given if isinstance(item, dict)]


def answered_call(request: dict[str, Any]) -> tuple[str, str] | None:
    """(tool name, output) when the request's last item is a tool's output: the model is
    being told what the call it made returned."""
    items = items_of(request)
    if not items or items[-1].get("type") != "function_call_output":
        return None
    call_id, output = items[-1].get("call_id"), items[-1].get("output")
    name = next(
        (
            str(item.get("name"))
            for item in items
            if item.get("type") == "function_call" and item.get("call_id") == call_id
        ),
        "",
    )
    return name, output if isinstance(output, str) else json.dumps(output)


def user_text(request: dict[str, Any]) -> str:
    """The latest user message's own text, without its author (`<@U1>: `)."""
    return last_user_text(SimpleNamespace(input=items_of(request)))


def user_texts(request: dict[str, Any]) -> list[str]:
    """The text of every user message in the request, as the model reads it (attributed)."""
    return call_user_texts(SimpleNamespace(input=items_of(request)))


def calls_made(request: dict[str, Any], name: str) -> int:
    """How many calls of the tool `name` the request's history holds."""
    return sum(
        1 for i in items_of(request) if i.get("type") == "function_call" and i.get("name") == name
    )


def _response(request: dict[str, Any], output: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "id": f"resp_{next(_ids)}",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": status,
        "model": request.get("model", "scripted"),
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": USAGE if status == "completed" else None,
    }


def _handler(script: ScriptedResponses) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/responses":
                self.send_error(404)
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            refused = refusal(body, script.window)
            if refused is not None:  # the service's answer to such a request, every time
                with script.lock:
                    script.refused.append(body)
                self._json(400, {"error": refused})
                return
            failure = script.failure()
            if failure is not None:  # a transient fault of the service
                retry_after = {"Retry-After": "1"} if failure == 429 else {}
                self._json(
                    failure,
                    {"error": {"message": "try again", "type": "server_error"}},
                    retry_after,
                )
                return
            try:
                headers = {name.lower(): value for name, value in self.headers.items()}
                output = script.next_output(body, headers)
            except Exception as exc:  # the script's own failure: an error answer, seen
                self._json(500, {"error": {"message": str(exc), "type": "server_error"}})
                return
            try:
                if body.get("stream"):
                    self._stream(body, output, script.number_of(body))
                else:
                    self._json(200, _response(body, output, "completed"))
            except (BrokenPipeError, ConnectionResetError):
                return  # the client gave up on the answer (a turn abandoned on a stop)

        def _json(
            self, code: int, document: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(document).encode()
            self.send_response(code)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, body: dict[str, Any], output: list[dict[str, Any]], number: int) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            sequence = itertools.count()

            def send(event: dict[str, Any]) -> None:
                event["sequence_number"] = next(sequence)
                chunk = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
                self.wfile.write(chunk.encode())
                self.wfile.flush()

            send({"type": "response.created", "response": _response(body, [], "in_progress")})
            for index, item in enumerate(output):
                if item.get("type") == "message":
                    self._stream_text(send, index, item, number)
                else:
                    send(
                        {"type": "response.output_item.added", "output_index": index, "item": item}
                    )
                send({"type": "response.output_item.done", "output_index": index, "item": item})
            send({"type": "response.completed", "response": _response(body, output, "completed")})

        def _stream_text(
            self,
            send: Callable[[dict[str, Any]], None],
            index: int,
            item: dict[str, Any],
            number: int,
        ) -> None:
            """The message's text, word by word."""
            opening = {**item, "status": "in_progress", "content": []}
            send({"type": "response.output_item.added", "output_index": index, "item": opening})
            text = "".join(part.get("text", "") for part in item.get("content", []))
            words = re.findall(r"\S+\s*|\s+", text)
            midway = script.midway.get(number)
            for position, word in enumerate(words):
                if midway is not None and position == len(words) // 2:
                    midway.wait(120)
                if script.delta_delay and position:
                    time.sleep(script.delta_delay)
                script.first_delta_at.setdefault(number, time.monotonic())
                send(
                    {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "delta": word,
                        "logprobs": [],
                    }
                )

    return Handler


class _Server(ThreadingHTTPServer):
    # A burst's model calls arrive at once; the default backlog of 5 resets the rest.
    request_queue_size = 1024
    daemon_threads = True


@contextmanager
def responses_server(script: ScriptedResponses) -> Iterator[str]:
    """Yield the base URL (`http://127.0.0.1:PORT/v1`)."""
    server = _Server(("127.0.0.1", 0), _handler(script))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
