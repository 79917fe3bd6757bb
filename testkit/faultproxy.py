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
`python -m testkit.faultproxy --upstream URL --service dynamodb` runs one stand-alone.

What a fault is: `fault_spec`; the answers it gives: `fault_answers`; the control surface:
`fault_control`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import random
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator
from typing import Any

import aiohttp
from aiohttp import web

from testkit.fault_answers import dropped, error_answer, forward
from testkit.fault_control import CONTROL, FaultControl, control_answer
from testkit.fault_spec import ACTIONS, Action, Fault, Service, check_fault, operation_of

__all__ = [
    "ACTIONS",
    "CONTROL",
    "Action",
    "Fault",
    "FaultControl",
    "FaultProxy",
    "Service",
    "main",
    "operation_of",
]


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
        check_fault(action, self.service, latency)
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
        self.remove_id(fault.id)

    def remove_id(self, fault_id: int) -> None:
        with self._lock:
            self._faults = [f for f in self._faults if f.id != fault_id]

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
            return await control_answer(self, request)
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
            return dropped(request)
        if fault.action == "drop_after":
            await self._forward(request, body)
            return dropped(request)
        return error_answer(self.service, fault.action, request.method)

    async def _forward(self, request: web.Request, body: bytes) -> web.Response:
        assert self._session is not None
        return await forward(self._session, self.upstream, request, body)


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
