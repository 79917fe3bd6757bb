"""A small service that deduplicates by idempotency key, as payment and ticketing APIs do:
`POST /apply {"key": ..., "what": ...}` (or the key in an `Idempotency-Key` header) applies
each key once and answers a repeated key with the first result; `late` makes it answer
after a while (applied, so a client that gives up first cannot tell). It runs in the test
process, outside every bot process, so that the effects it counts survive the bot being
killed."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class KeyedService:
    def __init__(self) -> None:
        self.effects: list[dict[str, Any]] = []  # each applied once
        self.requests: list[dict[str, Any]] = []  # every request, repeats included
        self._results: dict[str, dict[str, Any]] = {}
        self.late: list[float] = []  # seconds the next requests wait after applying, in turn
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self.url = ""

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.requests.append(request)
            self._arrived.notify_all()
            key = str(request.get("key", ""))
            if key in self._results:
                return {**self._results[key], "repeated": True}
            self.effects.append(request)
            result = {"id": f"effect-{len(self.effects)}", "what": request.get("what")}
            self._results[key] = result
            return result

    def keys(self) -> list[str]:
        return [str(r.get("key")) for r in self.requests]

    async def reached(self, count: int, seconds: float = 30) -> None:
        """Wait until `count` requests arrived (they come in on the server's threads)."""
        import asyncio

        def wait() -> bool:
            with self._arrived:
                return self._arrived.wait_for(lambda: len(self.requests) >= count, seconds)

        if not await asyncio.to_thread(wait):
            raise TimeoutError(f"{len(self.requests)} requests, not {count}")


@contextmanager
def keyed_service() -> Iterator[KeyedService]:
    service = KeyedService()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.headers.get("Idempotency-Key"):  # as Stripe takes it (examples/)
                body = {**body, "key": self.headers["Idempotency-Key"]}
            answer = json.dumps(service.apply(body)).encode()
            with service._lock:
                late = service.late.pop(0) if service.late else 0.0
            time.sleep(late)  # applied, answering late: a client may have given up
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client gave up waiting (`late`)

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    service.url = f"http://127.0.0.1:{server.server_address[1]}/apply"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield service
    finally:
        server.shutdown()
        server.server_close()


def call(url: str, key: str, what: str, *, timeout: float = 10) -> dict[str, Any]:
    """The client side, as a tool would call it (blocking; tools run it off the loop).
    Raises `TimeoutError` when no answer comes within `timeout` seconds."""
    import urllib.request

    request = urllib.request.Request(
        url,
        data=json.dumps({"key": key, "what": what}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        result: dict[str, Any] = json.loads(response.read())
    return result
