"""The fault proxy's control surface, for another process than the one serving it: the
endpoint under `CONTROL` on the proxy's own address (`control_answer`) and its client
(`FaultControl`).

    POST   /_faultproxy/faults        a fault, as JSON with `FaultProxy.inject`'s fields
    DELETE /_faultproxy/faults        heal: remove every fault
    DELETE /_faultproxy/faults/<id>   remove one
    GET    /_faultproxy/stats         requests and faulted ones by operation, live faults"""

from __future__ import annotations

import json
import urllib.request
from typing import Any, Protocol, cast

from aiohttp import web

from testkit.fault_spec import Action, Fault

CONTROL = "/_faultproxy"


class Steered(Protocol):
    """What the endpoint steers (a `FaultProxy`)."""

    # The fields come from a request's JSON: one the proxy does not take is a TypeError.
    def inject(self, *args: Any, **fields: Any) -> Fault: ...

    def remove_id(self, fault_id: int) -> None: ...

    def heal(self) -> None: ...

    def stats(self) -> dict[str, Any]: ...


async def control_answer(proxy: Steered, request: web.Request) -> web.Response:
    """Serve one request under `CONTROL`."""
    rest = request.path[len(CONTROL) :].strip("/")
    if request.method == "GET" and rest == "stats":
        return web.json_response(proxy.stats())
    if request.method == "POST" and rest == "faults":
        return await _injected(proxy, request)
    if request.method == "DELETE" and rest == "faults":
        proxy.heal()
        return web.json_response({"ok": True})
    if request.method == "DELETE" and rest.startswith("faults/"):
        proxy.remove_id(int(rest.partition("/")[2]))
        return web.json_response({"ok": True})
    return web.json_response({"error": "not found"}, status=404)


async def _injected(proxy: Steered, request: web.Request) -> web.Response:
    spec = await request.json()
    try:
        fault = proxy.inject(**spec)
    except (TypeError, ValueError) as exc:  # a field it does not take, or a value it refuses
        return web.json_response({"error": str(exc)}, status=400)
    return web.json_response({"id": fault.id})


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
