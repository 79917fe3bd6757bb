"""Prometheus metrics, served at GET /metrics."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from storage import Store
from storage.local import LocalStore

REGISTRY = CollectorRegistry()

EVENTS = Counter(
    "bot_slack_requests_total", "Slack requests handled, by kind", ["kind"], registry=REGISTRY
)
OUTCOMES = Counter("bot_outcomes_total", "Runtime outcomes, by type", ["type"], registry=REGISTRY)
NOTICES = Counter("bot_notices_total", "Notices posted, by kind", ["kind"], registry=REGISTRY)
RESUMES = Counter(
    "bot_resumes_total", "Conversations resumed, by trigger", ["trigger"], registry=REGISTRY
)
LEASE_CONFLICTS = Counter(
    "bot_lease_conflicts_total", "Messages queued because the thread was busy", registry=REGISTRY
)
DELIVERY_FAILURES = Counter(
    "bot_delivery_failures_total",
    "Slack posts that failed after retries, by Slack error",
    ["reason"],
    registry=REGISTRY,
)
TAKEOVERS = Counter(
    "bot_takeovers_total",
    "Threads taken from a live lease whose holder is dead, by how it was known",
    ["why"],
    registry=REGISTRY,
)
QUEUED = Counter(
    "bot_queued_total", "Threads that waited for a run slot (BOT_MAX_RUNS)", registry=REGISTRY
)
LEFT_FOR_NEWER = Counter(
    "bot_left_for_newer_total",
    "Conversations left alone because a newer version saved them (a rolling upgrade)",
    registry=REGISTRY,
)
DUPLICATES_DELETED = Counter(
    "bot_duplicate_posts_deleted_total",
    "Second copies of a post deleted by the read-back after a redelivery",
    registry=REGISTRY,
)
FEEDBACK = Counter(
    "bot_feedback_total", "Verdicts on answers, by verdict", ["verdict"], registry=REGISTRY
)
CONTEXT_SUMMARIES = Counter(
    "bot_context_summaries_total",
    "Summaries of a thread's earlier messages, by outcome (made; failed: the request went "
    "with a note of what was left out instead; reused: made before and not yet stored)",
    ["outcome"],
    registry=REGISTRY,
)
CONTEXT_TRIMMED = Counter(
    "bot_context_inputs_trimmed_total",
    "Model requests whose input was trimmed to fit the model's window, by what was done "
    "(cut: long items cut down; left_out: earlier messages left out)",
    ["what"],
    registry=REGISTRY,
)
CONTEXT_REFUSALS = Counter(
    "bot_context_refusals_total",
    "Requests the model service refused as too large, by what followed (retried: fitted into "
    "half the budget and sent again; too_large: the thread was told)",
    ["outcome"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "bot_operation_seconds",
    "Time to serve an operation, by kind",
    ["kind"],
    registry=REGISTRY,
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
STORAGE_OFF_LOOP = Gauge(
    "bot_storage_calls_off_loop",
    "1 while the embedded store's quick calls are made on worker threads, because on the "
    "event loop they held it too long (a slow disk)",
    registry=REGISTRY,
)


REQUESTS_IN_FLIGHT = Gauge(
    "bot_slack_requests_in_flight",
    "Slack requests being acknowledged, counted once their signature is verified (new runs "
    "wait a moment while any are)",
    registry=REGISTRY,
)


def watch_requests(in_flight: Callable[[], int]) -> None:
    """The gauge that reads the requests in flight (`in_flight`) when scraped."""
    REQUESTS_IN_FLIGHT.set_function(lambda: float(in_flight()))


def watch_storage(store: Store) -> None:
    """The gauges that read `store` when scraped (the embedded store's `LoopTime`)."""
    if isinstance(store, LocalStore):
        STORAGE_OFF_LOOP.set_function(lambda: float(store.loop_time.slow))
