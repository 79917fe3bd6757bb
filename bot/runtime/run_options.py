"""How each run is configured for the SDK: one `RunConfig` for the runtime (model, provider,
tracing on or off, model-call retries, putting shared files back into model requests), and
per run the conversation as the trace group and its Slack ids as trace metadata, so that
every turn of a thread (each is its own `Runner` call, and so its own trace) is found
together in whatever receives the traces (see `bot.tracing`)."""

from __future__ import annotations

import copy
from typing import Any

from agents import ModelRetrySettings, ModelSettings, RunConfig, retry_policies
from agents.models.interface import ModelProvider
from agents.models.openai_provider import OpenAIProvider
from agents.retry import ModelRetryBackoffSettings
from agents.run_config import CallModelData, ModelInputData

from bot.runtime.attachments import SharedFiles
from bot.runtime.model_access import offline
from bot.runtime.rate_gate import GatedProvider, RateGate
from bot.settings import RuntimeSettings
from storage import ConversationKey

WORKFLOW = "Slack thread"
RETRY_STATUSES = (408, 409, 429, 500, 502, 503, 504)
MAX_RETRY_DELAY = 15.0


def model_retry(settings: RuntimeSettings, gate: RateGate | None = None) -> ModelSettings:
    """Transient model errors (connection errors, timeouts, 429 and 5xx, or what the provider
    says may be retried) are retried with backoff before a run is reported as failed; what
    the provider says must not be replayed is not. A 429 closes the replica's `gate`."""
    observe = [gate.observe] if gate is not None else []
    return ModelSettings(
        retry=ModelRetrySettings(
            max_retries=settings.model_retries,
            backoff=ModelRetryBackoffSettings(
                initial_delay=settings.model_retry_delay,
                max_delay=MAX_RETRY_DELAY,
                multiplier=2.0,
                jitter=True,
            ),
            policy=retry_policies.any(
                *observe,
                retry_policies.provider_suggested(),
                retry_policies.network_error(),
                retry_policies.retry_after(),
                retry_policies.http_status(RETRY_STATUSES),
            ),
        )
    )


def base_run_config(
    settings: RuntimeSettings, files: SharedFiles, gate: RateGate | None = None
) -> RunConfig:
    return RunConfig(
        model=None if offline(settings) else settings.model,
        model_provider=model_provider(settings, gate),
        model_settings=model_retry(settings, gate),
        tracing_disabled=not settings.tracing,
        workflow_name=WORKFLOW,
        call_model_input_filter=files.resolve if gate is None else _gated(gate, files),
    )


def model_provider(settings: RuntimeSettings, gate: RateGate | None) -> ModelProvider:
    """OpenAI's, through the replica's rate gate; the offline model's with BOT_MODEL=offline."""
    if offline(settings):
        from bot.offline_model import OfflineProvider  # (it builds on the runtime's helpers)

        return OfflineProvider()
    # A provider of our own reads OPENAI_API_KEY / OPENAI_BASE_URL when first used.
    return OpenAIProvider() if gate is None else GatedProvider(gate)


def _gated(gate: RateGate, files: SharedFiles) -> Any:
    """Each model request first waits while the replica backs off a 429 (`rate_gate`)."""

    async def call_model_input_filter(data: CallModelData[Any]) -> ModelInputData:
        await gate.wait()
        return await files.resolve(data)

    return call_model_input_filter


def trace_metadata(key: ConversationKey, started_by: str) -> dict[str, str]:
    return {
        "slack_team": key.team,
        "slack_channel": key.channel,
        "slack_thread_ts": key.thread_ts,
        "slack_user": started_by,
    }


def for_run(base: RunConfig, key: ConversationKey, started_by: str) -> RunConfig:
    """The runtime's config, with this conversation as the trace group. A shallow copy:
    `dataclasses.replace` would run the config's validation again (type hints resolved on
    every call, a third of a millisecond per turn)."""
    config = copy.copy(base)
    config.group_id = str(key)
    config.trace_metadata = trace_metadata(key, started_by)
    return config
