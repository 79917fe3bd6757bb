"""`python -m bench.fire`: send prepared HTTP requests all at once and time each answer, in
a process of its own. The benchmark's own process also serves the Slack stand-in, which the
bot calls as soon as its runs start; an answer arriving while that process is busy would be
timed late, so the burst is sent and timed from here (garbage collection off meanwhile, as
`timeit` does).

stdin: {"url": ..., "requests": [{"body": ..., "headers": {...}}, ...]}
stdout: [[status, seconds], ...] in the same order."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
from typing import Any

import aiohttp


async def fire(url: str, requests: list[dict[str, Any]]) -> list[tuple[int, float]]:
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=60)
    ) as http:

        async def one(request: dict[str, Any]) -> tuple[int, float]:
            start = time.perf_counter()
            async with http.post(
                url, data=request["body"].encode(), headers=request["headers"]
            ) as response:
                await response.read()
                return response.status, time.perf_counter() - start

        return await asyncio.gather(*(one(r) for r in requests))


def main() -> None:
    job = json.load(sys.stdin)
    gc.disable()
    answers = asyncio.run(fire(job["url"], job["requests"]))
    json.dump(answers, sys.stdout)


if __name__ == "__main__":
    main()
