"""How each run is configured for the SDK: one `RunConfig` for the runtime (model, provider,
tracing on or off, model-call retries, what model requests are given: shared files put back
in, fitted into the model's window), and per run the conversation as the trace group and its
Slack ids as trace metadata, so that every turn of a thread (each is its own `Runner` call,
and so its own trace) is found together in whatever receives the traces (see `bot.tracing`),
with the run's view of the history (`summaries`)."""

from __future__ import annotations

import copy

from agents import ModelRetrySettings, ModelSettings, RunConfig, retry_policies
from agents.memory import SessionSettings
from agents.models.interface import ModelProvider
from agents.models.openai_provider import OpenAIProvider
from agents.retry import ModelRetryBackoffSettings

from bot.runtime.attachments import SharedFiles
from bot.runtime.model_access import offline
from bot.runtime.model_window import ContextWindow, ModelInputFilter, RunView
from bot.runtime.rate_gate import GatedProvider, RateGate
from bot.runtime.window_refusals import FittingProvider
from bot.settings import RuntimeSettings
from storage import ConversationKey

WORKFLOW = "Slack thread"
SUMMARY_WORKFLOW = "Slack thread summary"
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
    settings: RuntimeSettings,
    files: SharedFiles,
    gate: RateGate | None = None,
    window: ContextWindow | None = None,
) -> RunConfig:
    """Every model request waits while the replica backs off a 429 (`rate_gate`), gets the
    shared files' bytes back, and is fitted into the model's window (`model_window`),
    whose refusal as too large gets one more try, smaller (`window_refusals`)."""
    provider = model_provider(settings, gate)
    if window is not None:
        provider = FittingProvider(provider, window.budget_for)
    return RunConfig(
        model=None if offline(settings) else settings.model,
        model_provider=provider,
        model_settings=model_retry(settings, gate),
        tracing_disabled=not settings.tracing,
        workflow_name=WORKFLOW,
        call_model_input_filter=ModelInputFilter(files, gate, window),
    )


def model_provider(settings: RuntimeSettings, gate: RateGate | None) -> ModelProvider:
    """OpenAI's, through the replica's rate gate; the offline model's with BOT_MODEL=offline."""
    if offline(settings):
        from bot.offline_model import OfflineProvider  # (it builds on the runtime's helpers)

        return OfflineProvider()
    # A provider of our own reads OPENAI_API_KEY / OPENAI_BASE_URL when first used.
    return OpenAIProvider() if gate is None else GatedProvider(gate)


def trace_metadata(key: ConversationKey, started_by: str) -> dict[str, str]:
    return {
        "slack_team": key.team,
        "slack_channel": key.channel,
        "slack_thread_ts": key.thread_ts,
        "slack_user": started_by,
    }


def for_run(
    base: RunConfig,
    key: ConversationKey,
    started_by: str,
    *,
    view: RunView | None = None,
    summarizing: bool = False,
) -> RunConfig:
    """The runtime's config, with this conversation as the trace group; `view` is what a
    run is given of the history (`summaries`); `summarizing`: a summary's request, fitted by
    its maker. A shallow copy: `dataclasses.replace` would run
    the config's validation again (type hints resolved on every call, a third of a
    millisecond per turn)."""
    config = copy.copy(base)
    config.group_id = str(key)
    config.trace_metadata = trace_metadata(key, started_by)
    given = config.call_model_input_filter
    if isinstance(given, ModelInputFilter):
        if summarizing:
            config.call_model_input_filter = given.unfitted()
            config.workflow_name = SUMMARY_WORKFLOW
        elif view is not None:
            config.call_model_input_filter = given.with_view(view)
    if view is not None and view.reads is not None:
        config.session_settings = SessionSettings(limit=view.reads)
    return config
