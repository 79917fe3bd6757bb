"""The model service's rate limit, backed off once per replica: a 429 seen by one run closes
the gate for its Retry-After, and every run of the replica waits at the gate (`wait`, before
each model request: the runs' `call_model_input_filter`) instead of each meeting its own 429.
The run that met it retries after the same delay (the openai client's own retries, then the
SDK's retry policies). A 429 is seen on the HTTP response (`GatedProvider`: the openai
client retries a 429 itself, before any SDK policy could see it), and by a retry policy
that only looks (`observe`) for models of other providers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agents.models.openai_provider import OpenAIProvider
from agents.retry import RetryPolicyContext
from openai import AsyncOpenAI, DefaultAsyncHttpx2Client

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

    async def on_response(self, response: Any) -> None:
        """An HTTP response hook: a 429 closes the gate for its Retry-After."""
        if getattr(response, "status_code", None) == 429:
            self.hold(_seconds(response.headers.get("retry-after")))


def _seconds(value: str | None) -> float:
    try:
        return float(value) if value is not None else DEFAULT_BACKOFF
    except ValueError:  # an HTTP date: the default is near enough
        return DEFAULT_BACKOFF


class GatedProvider(OpenAIProvider):
    """OpenAI's provider, its client on an HTTP client of its own whose responses the gate
    sees (made when first used, as the provider's own: it reads OPENAI_API_KEY then)."""

    def __init__(self, gate: RateGate) -> None:
        super().__init__()
        self.gate = gate

    def _get_client(self) -> AsyncOpenAI:
        if self._client is None:
            http = DefaultAsyncHttpx2Client(event_hooks={"response": [self.gate.on_response]})
            self._client = super()._get_client().with_options(http_client=http)
        return self._client
