"""The model service's rate limit, backed off once per replica: a 429 seen by one run
(`observe`, a retry policy that only looks) closes the gate for its Retry-After, and every
run of the replica waits at the gate (`wait`, before each model request: the runs'
`call_model_input_filter`) instead of each meeting its own 429. The run that met it retries
after the same delay (the SDK's retry policies)."""

from __future__ import annotations

import asyncio
import time

from agents.retry import RetryPolicyContext

DEFAULT_BACKOFF = 1.0  # seconds, when a 429 says nothing of when to come back
MAX_BACKOFF = 60.0


class RateGate:
    def __init__(self) -> None:
        self.until = 0.0  # time.monotonic() when model requests may go again
        self.closed_times = 0  # 429s that closed (or extended) the gate
        self.waited = 0  # requests that waited at it

    def hold(self, seconds: float) -> None:
        until = time.monotonic() + min(max(seconds, 0.0), MAX_BACKOFF)
        if until > self.until:
            self.until = until
            self.closed_times += 1

    def blocked_for(self) -> float:
        return max(0.0, self.until - time.monotonic())

    async def wait(self) -> None:
        delay = self.blocked_for()
        if delay:
            self.waited += 1
        while delay > 0:  # the gate may be held longer meanwhile
            await asyncio.sleep(delay)
            delay = self.blocked_for()

    def observe(self, context: RetryPolicyContext) -> bool:
        """A retry policy that decides nothing: it notes a 429 for the whole replica."""
        if context.normalized.status_code == 429:
            delay = context.normalized.retry_after
            if delay is None and context.provider_advice is not None:
                delay = context.provider_advice.retry_after
            self.hold(DEFAULT_BACKOFF if delay is None else delay)
        return False
