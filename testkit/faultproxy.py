"""A loopback reverse proxy that injects faults in front of an HTTP upstream (DynamoDB Local or
the moto S3 server), from outside the application: the application only gets a different
endpoint URL (`AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_S3`).

Faults, chosen per request (the first live fault that matches applies):

  throttle     DynamoDB: 400 ThrottlingException; S3: 503 SlowDown
  error500     500 (InternalServerError / InternalError)
  error503     503 (ServiceUnavailable)
  drop_before  close the connection without answering; the upstream never sees the request
  drop_after   forward, then close the connection: the write landed, the client saw an error
  delay        add latency, then forward
  conflict     DynamoDB only: 400 TransactionCanceledException, the first item's reason
               TransactionConflict (another write touched it meanwhile), as DynamoDB
               answers a transaction that met a concurrent write; nothing landed

each for the next `times` matching requests, for `seconds`, with a `probability`, optionally
only for one operation (the DynamoDB `X-Amz-Target` action, e.g. `TransactWriteItems`, or an S3
operation such as `PutObject`) or HTTP method; `latency` also delays the other actions.

In a test:

    with FaultProxy(dynamodb_url, "dynamodb") as proxy, \\
         proxy.fault("throttle", times=1, operation="TransactWriteItems"):
        ...  # the next TransactWriteItems is throttled

Another process steers it over HTTP (`FaultControl`, or `POST /_faultproxy/faults` with the
same fields as JSON, `DELETE /_faultproxy/faults` to heal, `GET /_faultproxy/stats`).
`python -m testkit.faultproxy --upstream URL --service dynamodb` runs one stand-alone."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import random
import socket
import threading
import time
import urllib.request
import uuid
import zlib
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal, cast

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

Service = Literal["dynamodb", "s3"]
Action = Literal[
    "throttle", "error500", "error503", "drop_before", "drop_after", "delay", "conflict"
]
ACTIONS: tuple[Action, ...] = (
    "throttle",
    "error500",
    "error503",
    "drop_before",
    "drop_after",
    "delay",
    "conflict",
)
CONTROL = "/_faultproxy"
# Not forwarded either way: connection-level headers, and lengths aiohttp sets itself.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "expect",
        "content-length",
    }
)
_DYNAMODB_ERRORS: dict[str, tuple[int, str, str]] = {
    "throttle": (400, "com.amazonaws.dynamodb.v20120810#ThrottlingException", "Rate exceeded"),
    "error500": (
        500,
        "com.amazonaws.dynamodb.v20120810#InternalServerError",
        "Internal server error",
    ),
    "error503": (
        503,
        "com.amazon.coral.availability#ServiceUnavailableException",
        "Service unavailable",
    ),
    "conflict": (
        400,
        "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "Transaction cancelled, please refer cancellation reasons for specific reasons "
        "[TransactionConflict, None]",
    ),
}
_S3_ERRORS: dict[str, tuple[int, str, str]] = {
    "throttle": (503, "SlowDown", "Please reduce your request rate."),
    "error500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "error503": (503, "ServiceUnavailable", "Service is unable to handle request."),
}


@dataclass
class Fault:
    """One scripted fault. `until` is a `time.monotonic()` deadline; `hits` counts the
    requests it was applied to."""

    action: Action
    times: int | None = None
    until: float | None = None
    probability: float = 1.0
    operation: str | None = None
    method: str | None = None
    latency: float = 0.0
    id: int = 0
    hits: int = 0

    def live(self, now: float) -> bool:
        return (self.times is None or self.hits < self.times) and (
            self.until is None or now < self.until
        )

    def matches(self, operation: str, method: str) -> bool:
        return (self.operation is None or self.operation == operation) and (
            self.method is None or self.method.upper() == method
        )

    def describe(self) -> dict[str, Any]:
        data = asdict(self)
        if self.until is not None:
            data["until"] = None
            data["seconds_left"] = round(max(0.0, self.until - time.monotonic()), 3)
        return data


def operation_of(service: Service, method: str, path: str, headers: Any, query: Any) -> str:
    """The API operation a request is: `PutItem`, `TransactWriteItems`, `PutObject`, ..."""
    if service == "dynamodb":
        target = str(headers.get("X-Amz-Target", ""))
        return target.rpartition(".")[2] or f"{method} {path}"
    parts = [part for part in path.split("/") if part]
    if len(parts) >= 2:
        if method == "PUT" and "x-amz-copy-source" in headers:
            return "CopyObject"
        return {"GET": "GetObject", "PUT": "PutObject", "DELETE": "DeleteObject"}.get(
            method, f"{method.title()}Object"
        )
    if len(parts) == 1:
        if method == "POST" and "delete" in query:
            return "DeleteObjects"
        if method == "GET":
            return "ListObjectsV2" if query.get("list-type") == "2" else "ListObjects"
        return {"PUT": "CreateBucket", "DELETE": "DeleteBucket"}.get(
            method, f"{method.title()}Bucket"
        )
    return "ListBuckets" if method == "GET" else f"{method} /"


class FaultProxy:
    """The proxy. `start()` serves it on its own thread and event loop (usable from plain
    pytest tests); `start_async()` serves it on the caller's loop. Scripting methods are
    thread-safe and may be called from any thread."""

    def __init__(
        self,
        upstream: str,
        service: Service,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int | None = None,
        history: int = 10_000,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.service = service
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.url = f"http://{host}:{self._sock.getsockname()[1]}"
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._ids = itertools.count(1)
        self.requests: Counter[str] = Counter()  # every request, by operation
        self.faulted: Counter[str] = Counter()  # "operation:action" -> applied
        self.history: deque[dict[str, Any]] = deque(maxlen=history)  # the faulted requests
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None

    # -- scripting ----------------------------------------------------------------------

    def inject(
        self,
        action: Action,
        *,
        times: int | None = None,
        seconds: float | None = None,
        probability: float = 1.0,
        operation: str | None = None,
        method: str | None = None,
        latency: float = 0.0,
    ) -> Fault:
        """Add a fault; with neither `times` nor `seconds` it lasts until removed."""
        if action not in ACTIONS:
            raise ValueError(f"unknown fault action {action!r} (one of {', '.join(ACTIONS)})")
        if action == "delay" and latency <= 0:
            raise ValueError("a delay fault needs latency > 0")
        if action == "conflict" and self.service != "dynamodb":
            raise ValueError("a conflict fault is DynamoDB's (a cancelled transaction)")
        fault = Fault(
            action=action,
            times=times,
            until=None if seconds is None else time.monotonic() + seconds,
            probability=probability,
            operation=operation,
            method=method,
            latency=latency,
            id=next(self._ids),
        )
        with self._lock:
            self._faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        with self._lock:
            self._faults = [f for f in self._faults if f.id != fault.id]

    def heal(self) -> None:
        """Remove every fault: pass everything through from now on."""
        with self._lock:
            self._faults.clear()

    @contextlib.contextmanager
    def fault(self, action: Action, **options: Any) -> Iterator[Fault]:
        """`inject` for the duration of a `with` block."""
        added = self.inject(action, **options)
        try:
            yield added
        finally:
            self.remove(added)

    def faults(self) -> list[Fault]:
        now = time.monotonic()
        with self._lock:
            return [f for f in self._faults if f.live(now)]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": dict(self.requests),
                "faulted": dict(self.faulted),
                "faults": [f.describe() for f in self._faults if f.live(time.monotonic())],
            }

    def _choose(self, operation: str, method: str) -> Fault | None:
        now = time.monotonic()
        with self._lock:
            self.requests[operation] += 1
            self._faults = [f for f in self._faults if f.live(now)]
            for fault in self._faults:
                if not fault.matches(operation, method):
                    continue
                if fault.probability < 1.0 and self._random.random() >= fault.probability:
                    continue
                fault.hits += 1
                self.faulted[f"{operation}:{fault.action}"] += 1
                self.history.append(
                    {"at": time.time(), "operation": operation, "action": fault.action}
                )
                return fault
        return None

    # -- serving ------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Serve on a thread of its own until `stop()`."""
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            async def main() -> None:
                try:
                    await self.start_async()
                except BaseException as exc:
                    failure.append(exc)
                    started.set()
                    raise
                self._stopping = asyncio.Event()
                started.set()
                await self._stopping.wait()
                await self.stop_async()

            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(main())
            finally:
                self._loop.close()

        self._thread = threading.Thread(target=run, name=f"faultproxy {self.url}", daemon=True)
        self._thread.start()
        started.wait(30)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._thread is None or self._loop is None or self._stopping is None:
            return
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(30)
        self._thread = None

    async def start_async(self) -> FaultProxy:
        self._session = aiohttp.ClientSession(
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=120)
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.SockSite(self._runner, self._sock).start()
        return self

    async def stop_async(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> FaultProxy:
        return await self.start_async()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_async()

    # -- requests -----------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith(CONTROL):
            return await self._control(request)
        body = await request.read()
        operation = operation_of(
            self.service, request.method, request.path, request.headers, request.query
        )
        fault = self._choose(operation, request.method)
        if fault is None:
            return await self._forward(request, body)
        if fault.latency > 0:
            await asyncio.sleep(fault.latency)
        if fault.action == "delay":
            return await self._forward(request, body)
        if fault.action == "drop_before":
            return _drop(request)
        if fault.action == "drop_after":
            await self._forward(request, body)
            return _drop(request)
        return self._error(fault.action, request)

    async def _forward(self, request: web.Request, body: bytes) -> web.Response:
        assert self._session is not None
        headers = CIMultiDict(
            (name, value)
            for name, value in request.headers.items()
            if name.lower() not in _HOP_BY_HOP
        )
        try:
            async with self._session.request(
                request.method,
                self.upstream + request.path_qs,
                headers=headers,
                data=body or None,
                allow_redirects=False,
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            ) as upstream:
                payload = await upstream.read()
                answer_headers = CIMultiDict(
                    (name, value)
                    for name, value in upstream.headers.items()
                    if name.lower() not in _HOP_BY_HOP
                )
                if request.method == "HEAD" and "Content-Length" in upstream.headers:
                    answer_headers["Content-Length"] = upstream.headers["Content-Length"]
                return web.Response(status=upstream.status, body=payload, headers=answer_headers)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return web.Response(status=502, text=f"faultproxy: upstream failed: {exc}")

    def _error(self, action: Action, request: web.Request) -> web.Response:
        request_id = uuid.uuid4().hex.upper()[:20]
        if self.service == "dynamodb":
            status, kind, message = _DYNAMODB_ERRORS[action]
            document: dict[str, Any] = {"__type": kind, "message": message}
            if action == "conflict":
                document["CancellationReasons"] = [
                    {"Code": "TransactionConflict", "Message": "Transaction is ongoing"},
                    {"Code": "None"},
                ]
            body = json.dumps(document).encode()
            return web.Response(
                status=status,
                body=body,
                headers={
                    "Content-Type": "application/x-amz-json-1.0",
                    "x-amzn-ErrorType": kind.rpartition("#")[2],
                    "x-amzn-RequestId": request_id,
                    "x-amz-crc32": str(zlib.crc32(body) & 0xFFFFFFFF),
                },
            )
        status, code, message = _S3_ERRORS[action]
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            f"<RequestId>{request_id}</RequestId><HostId>faultproxy</HostId></Error>"
        )
        return web.Response(
            status=status,
            body=b"" if request.method == "HEAD" else xml.encode(),
            headers={"Content-Type": "application/xml", "x-amz-request-id": request_id},
        )

    # -- control endpoint ---------------------------------------------------------------

    async def _control(self, request: web.Request) -> web.Response:
        rest = request.path[len(CONTROL) :].strip("/")
        if request.method == "GET" and rest == "stats":
            return web.json_response(self.stats())
        if request.method == "POST" and rest == "faults":
            spec = await request.json()
            try:
                fault = self.inject(**spec)
            except (TypeError, ValueError) as exc:
                return web.json_response({"error": str(exc)}, status=400)
            return web.json_response({"id": fault.id})
        if request.method == "DELETE" and rest == "faults":
            self.heal()
            return web.json_response({"ok": True})
        if request.method == "DELETE" and rest.startswith("faults/"):
            fault_id = int(rest.partition("/")[2])
            with self._lock:
                self._faults = [f for f in self._faults if f.id != fault_id]
            return web.json_response({"ok": True})
        return web.json_response({"error": "not found"}, status=404)


def _drop(request: web.Request) -> web.Response:
    """Close the client's connection without an answer (what it reads is a disconnect)."""
    if request.transport is not None:
        request.transport.close()
    return web.Response(status=500, text="dropped")  # never reaches the client


class FaultControl:
    """Steer a proxy from another process, through its control endpoint."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/") + CONTROL

    def _send(self, method: str, path: str, document: object | None = None) -> Any:
        data = None if document is None else json.dumps(document).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def inject(self, action: Action, **options: Any) -> int:
        return cast(int, self._send("POST", "/faults", {"action": action, **options})["id"])

    def remove(self, fault_id: int) -> None:
        self._send("DELETE", f"/faults/{fault_id}")

    def heal(self) -> None:
        self._send("DELETE", "/faults")

    def stats(self) -> dict[str, Any]:
        return cast(dict[str, Any], self._send("GET", "/stats"))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m testkit.faultproxy", description=__doc__)
    parser.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:8000")
    parser.add_argument("--service", choices=["dynamodb", "s3"], required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    proxy = FaultProxy(args.upstream, args.service, port=args.port)

    async def serve() -> None:
        async with proxy:
            print(f"faultproxy: {proxy.url} -> {proxy.upstream} ({proxy.service})", flush=True)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
