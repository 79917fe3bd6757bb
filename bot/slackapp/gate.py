"""What `POST /slack/events` lets through to bolt: a request Slack signed, checked before its
body is parsed. bolt parses a body before it verifies the signature (and logs an unsigned
body whole when the check fails); its JSON parser meets deep nesting with a `RecursionError`,
so an anonymous request could cost a 500 and a traceback. Here the cheap checks come first
(the signature's headers, Slack's content types, the size), then the body is read (at most
`BODY_LIMIT` bytes), decoded as UTF-8, and its signature verified by slack_sdk's
`SignatureVerifier` (bolt's own: `v0` HMAC over timestamp and body, 5 minutes' leeway); only
then is it parsed, and what does not parse into an object of bounded depth is refused too.

The body must arrive within `BODY_SECONDS` (aiohttp bounds the size of a request line and
its headers, not the time a body takes); a client that sends it slowly, or goes away before
it is read, gets a 4xx like any other refusal (to a client gone, none is sent), not a
traceback. Nothing here counts as a request in flight: the HTTP layer counts a request only
once its signature is verified (`server.events_route`).

Every refusal is a 4xx and one log line that never quotes the body (`NotFromSlack`)."""

from __future__ import annotations

import asyncio

from aiohttp import web
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier

# aiohttp's default `client_max_size`, which refused larger bodies before the gate existed:
# far above what Slack sends (an event, or a click on a message of 50 blocks of 3,000
# characters, is tens to a few hundred KB, even form-encoded), and a bound on what one
# anonymous request can make the process hold and hash.
BODY_LIMIT = 1024 * 1024
# Slack's deepest payloads (rich text in a message inside a block_actions payload) nest
# about 15 levels; the interpreter's recursion limit (1000), which json and any recursive
# walk of the payload would hit, is far beyond this.
DEPTH_LIMIT = 128
# Events come as JSON; slash commands, interactivity and ssl_check as forms.
SLACK_TYPES = frozenset({"application/json", "application/x-www-form-urlencoded"})
SIGNATURE, TIMESTAMP = "X-Slack-Signature", "X-Slack-Request-Timestamp"
# What bolt's parsing raises on a body of a shape it does not expect.
UNPARSABLE = (ValueError, RecursionError, LookupError, TypeError, AttributeError)
CHUNK = 64 * 1024
# Slack gives up on a request it has no answer to within 3 s (and sends it again): a body
# still arriving after this is not worth waiting for, and a slow sender holds a socket and
# at most `BODY_LIMIT` bytes no longer than this.
BODY_SECONDS = 5.0


class NotFromSlack(Exception):
    """A request that is not Slack's: the 4xx it gets, and why (a fixed phrase, safe to log
    and to answer with; never the body)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason

    def response(self) -> web.Response:
        return web.json_response({"error": self.reason}, status=self.status)


def slack_request(request: web.Request, body: str) -> AsyncBoltRequest:
    """bolt's request for `request`, whose `body` Slack signed (`signed_body`), once the body
    is parsed; raises `NotFromSlack` otherwise. bolt verifies the signature again (the same
    verifier on the same text), so its semantics are unchanged."""
    try:
        parsed = AsyncBoltRequest(
            body=body,
            query=request.query_string,
            headers=request.headers,  # type: ignore[arg-type]
        )
    except UNPARSABLE as exc:
        raise NotFromSlack(400, f"unreadable body ({type(exc).__name__})") from None
    if not isinstance(parsed.body, dict) or nests_deeper(parsed.body, DEPTH_LIMIT):
        raise NotFromSlack(400, "not a Slack payload")
    return parsed


async def signed_body(request: web.Request, verifier: SignatureVerifier) -> str:
    """The body as text, if Slack signed it; raises `NotFromSlack` otherwise, reading no more of
    the body than `BODY_LIMIT` bytes, and none of it when the headers already refuse it."""
    signature, timestamp = request.headers.get(SIGNATURE), request.headers.get(TIMESTAMP)
    if not signature or not timestamp:
        raise NotFromSlack(401, "not signed")
    if request.content_type not in SLACK_TYPES:
        raise NotFromSlack(415, "not a content type Slack sends")
    raw = await capped_body(request, BODY_LIMIT, BODY_SECONDS)
    try:
        body = raw.decode("utf-8")  # what Slack sends, and what the signature check decodes
    except UnicodeDecodeError:
        raise NotFromSlack(400, "not UTF-8") from None
    try:
        valid = verifier.is_valid(body, timestamp, signature)
    except ValueError:  # a timestamp that is not a number
        valid = False
    if not valid:
        raise NotFromSlack(401, "invalid or expired signature")
    return body


async def capped_body(request: web.Request, limit: int, seconds: float) -> bytes:
    """The whole body, or `NotFromSlack`: 413 as soon as it is longer than `limit` bytes (by
    its Content-Length, or while reading a body sent without one), 408 when it is not all
    there within `seconds`, 400 when the client goes away first."""
    if request.content_length is not None and request.content_length > limit:
        raise NotFromSlack(413, "body too large")
    body = bytearray()
    try:
        async with asyncio.timeout(seconds):
            while chunk := await request.content.read(CHUNK):
                body += chunk
                if len(body) > limit:
                    raise NotFromSlack(413, "body too large")
    except TimeoutError:
        raise NotFromSlack(408, "body not received in time") from None
    except ConnectionResetError:  # aiohttp's "Connection lost", which it would log whole
        raise NotFromSlack(400, "client went away before sending its body") from None
    return bytes(body)


def nests_deeper(value: object, limit: int) -> bool:
    """True when `value` nests objects and arrays more than `limit` levels deep (level by
    level, not recursively)."""
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(limit):
        if not level:
            return False
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
    return bool(level)
