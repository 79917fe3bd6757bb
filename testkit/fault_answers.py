"""What the fault proxy (`testkit.faultproxy`) answers: the upstream's own answer, forwarded,
or the error the service itself would give (so that the client's retry logic sees the real
thing), or a dropped connection."""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Iterable
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from testkit.fault_spec import Action, Service

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


async def forward(
    session: aiohttp.ClientSession, upstream: str, request: web.Request, body: bytes
) -> web.Response:
    """The upstream's answer to `request` (502 when the upstream cannot be reached)."""
    try:
        async with session.request(
            request.method,
            upstream + request.path_qs,
            headers=_passed(request.headers.items()),
            data=body or None,
            allow_redirects=False,
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        ) as answer:
            payload = await answer.read()
            headers = _passed(answer.headers.items())
            if request.method == "HEAD" and "Content-Length" in answer.headers:
                headers["Content-Length"] = answer.headers["Content-Length"]
            return web.Response(status=answer.status, body=payload, headers=headers)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return web.Response(status=502, text=f"faultproxy: upstream failed: {exc}")


def _passed(headers: Iterable[tuple[str, str]]) -> CIMultiDict[str]:
    return CIMultiDict((name, value) for name, value in headers if name.lower() not in _HOP_BY_HOP)


def error_answer(service: Service, action: Action, method: str) -> web.Response:
    """The error `service` gives for `action` (throttle, error500, error503, conflict)."""
    request_id = uuid.uuid4().hex.upper()[:20]
    if service == "dynamodb":
        return _dynamodb_error(action, request_id)
    return _s3_error(action, method, request_id)


def _dynamodb_error(action: Action, request_id: str) -> web.Response:
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


def _s3_error(action: Action, method: str, request_id: str) -> web.Response:
    status, code, message = _S3_ERRORS[action]
    xml = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<RequestId>{request_id}</RequestId><HostId>faultproxy</HostId></Error>"
    )
    return web.Response(
        status=status,
        body=b"" if method == "HEAD" else xml.encode(),
        headers={"Content-Type": "application/xml", "x-amz-request-id": request_id},
    )


def dropped(request: web.Request) -> web.Response:
    """Close the client's connection without an answer (what it reads is a disconnect)."""
    if request.transport is not None:
        request.transport.close()
    return web.Response(status=500, text="dropped")  # never reaches the client
