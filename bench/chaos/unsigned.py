"""Slow unsigned requests in a chaos run (`bench.chaos.shapes.UnsignedPlan`): connections to a
replica's `/slack/events` with Slack's headers but a bogus signature, whose body (a message
event in one of the run's threads, tagged `s<seed>x<n>`) trickles in; then completed (the
bot refuses it: 401), never finished (408 after the bot's `BODY_SECONDS`), or dropped by the
client. Meanwhile the replica's `bot_slack_requests_in_flight` (its `/metrics`) is read,
whenever the harness has no signed request on its way to that replica: none may be counted
then (only a request Slack signed counts, and runs wait only for those)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from bench.chaos.facts import InFlightSample, UnsignedFacts
from bench.chaos.faults import Cluster
from bench.chaos.people import ThreadState
from bench.chaos.shapes import UnsignedPlan
from bench.chaos.slack import TEAM, Deliverer
from bot.standin import requests

GAUGE = re.compile(r"^bot_slack_requests_in_flight (\S+)$", re.M)
STATUS = re.compile(rb"^HTTP/1\.[01] (\d{3}) ")
PIECES = 20  # the body arrives in this many pieces over the plan's seconds


@dataclass(eq=False)
class UnsignedRequests:
    seed: int
    cluster: Cluster
    deliverer: Deliverer
    threads: list[ThreadState]
    note: Callable[..., None]
    found: list[UnsignedFacts] = field(default_factory=list, init=False)
    samples: list[InFlightSample] = field(default_factory=list, init=False)
    # replica URL -> unsigned connections open (mid-body)
    open: dict[str, int] = field(default_factory=dict, init=False)
    busy: int = field(default=0, init=False)

    async def play(self, plans: list[UnsignedPlan], started: float) -> None:
        if not plans:
            return
        self.busy += 1
        try:
            sampling = asyncio.create_task(self._sample())
            try:
                await asyncio.gather(
                    *(self._one(number, plan, started) for number, plan in enumerate(plans))
                )
            finally:
                sampling.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampling
        finally:
            self.busy -= 1

    async def _one(self, number: int, plan: UnsignedPlan, started: float) -> None:
        await asyncio.sleep(max(0.0, started + plan.at - time.monotonic()))
        replicas = self.cluster.replicas[: self.cluster.wanted]
        replica = replicas[min(plan.slot, len(replicas) - 1)]
        tag = f"s{self.seed}x{number}"
        facts = UnsignedFacts(replica.url, tag, plan.ends, time.time())
        self.found.append(facts)
        body = self._body(tag).encode()
        stamp = str(int(time.time()))
        head = (
            "POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\n"
            f"X-Slack-Signature: v0={secrets.token_hex(32)}\r\n"
            f"X-Slack-Request-Timestamp: {stamp}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        sent = len(body) if plan.ends == "complete" else len(body) - 1  # one byte short
        writer = None
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", replica.port)
            writer.write(head)
            await writer.drain()
            answered = asyncio.create_task(reader.readline())  # it may come before the end
            self.open[replica.url] = self.open.get(replica.url, 0) + 1
            try:
                with contextlib.suppress(OSError):  # refused mid-body: the answer tells
                    await self._trickle(writer, body[:sent], plan.seconds, answered)
                if plan.ends == "abandon":
                    answered.cancel()
                    return
                line = await asyncio.wait_for(answered, 15)
            finally:
                self.open[replica.url] -= 1
            found = STATUS.match(line)
            facts.status = int(found.group(1)) if found else None
            if found is None:
                facts.error = f"no status line: {line[:40]!r}"
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            facts.error = type(exc).__name__
        finally:
            facts.closed_at = time.time()
            if writer is not None:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
            self.note(
                "unsigned",
                tag=tag,
                to=replica.url,
                ends=plan.ends,
                status=facts.status,
                error=facts.error,
            )

    async def _trickle(
        self,
        writer: asyncio.StreamWriter,
        body: bytes,
        seconds: float,
        answered: asyncio.Task[bytes],
    ) -> None:
        """The body in pieces over `seconds`, unless the replica answers first."""
        size = max(1, -(-len(body) // PIECES))
        for start in range(0, len(body), size):
            await asyncio.sleep(seconds / PIECES)
            if answered.done():
                return
            writer.write(body[start : start + size])
            await writer.drain()

    def _body(self, tag: str) -> str:
        """A message event in one of the run's threads, saying the tag."""
        thread = next((t for t in self.threads if t.ts is not None), None)
        channel = thread.plan.channel if thread else f"CS{self.seed}A"
        event = requests.message(
            channel=channel,
            ts=f"{time.time():.6f}",
            user="UMALLORY",
            text=f"and kiwi? #{tag}",
            thread_ts=thread.ts if thread else None,
            team=TEAM,
        )
        return requests.event_callback(TEAM, event)

    async def _sample(self) -> None:
        """Every tenth of a second, each replica with an unsigned connection open is read,
        when no signed request of the harness is on its way there (before, during and after
        the read) and none was given up on there in this run."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as http:
            while True:
                await asyncio.sleep(0.1)
                for url, count in list(self.open.items()):
                    if count <= 0 or url in self.deliverer.abandoned:
                        continue
                    sent = self.deliverer.sent.get(url, 0)
                    if self.deliverer.outstanding.get(url, 0):
                        continue
                    value = await self._read(http, url)
                    quiet = self.deliverer.sent.get(url, 0) == sent and not (
                        self.deliverer.outstanding.get(url, 0)
                    )
                    if value is not None and quiet and self.open.get(url, 0) > 0:
                        self.samples.append(InFlightSample(url, time.time(), value, count))

    async def _read(self, http: aiohttp.ClientSession, url: str) -> float | None:
        try:
            async with http.get(f"{url}/metrics") as page:
                found = GAUGE.search(await page.text())
        except (aiohttp.ClientError, TimeoutError):
            return None
        return float(found.group(1)) if found else None
