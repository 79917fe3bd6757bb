"""Where Agents SDK traces go, set once per process (see docs/operations.md, "Traces").

`BOT_TRACING=true` turns tracing on; by default the SDK exports to OpenAI (it needs
`OPENAI_API_KEY`). `BOT_TRACE_PROCESSORS` names other receivers instead: a comma-separated
list of `module:function` factories, each returning a `TracingProcessor` (or a list of them),
for example an OpenTelemetry or vendor exporter; the word `openai` in the list keeps OpenAI's
exporter as well, and `bot.tracing:json_log` is a built-in one that writes finished traces
and spans as JSON lines to the `bot.traces` logger. `OPENAI_AGENTS_DISABLE_TRACING=1` turns
all of it off whatever else is set (the SDK reads it)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from agents.tracing import Span, Trace, TracingProcessor, set_trace_processors
from agents.tracing.processors import default_processor

from bot.agent_loader import import_factory

log = logging.getLogger(__name__)
OPENAI = "openai"


class TracingConfigError(Exception):
    pass


def configure_tracing(enabled: bool, processors: Sequence[str]) -> list[TracingProcessor]:
    """Install the processors `BOT_TRACE_PROCESSORS` names (none when tracing is off or the
    list is empty: the SDK's default stays). Returns what was installed."""
    if not enabled or not processors:
        return []
    chosen: list[TracingProcessor] = []
    for spec in processors:
        chosen += [default_processor()] if spec == OPENAI else _load(spec)
    set_trace_processors(chosen)
    log.info("traces go to %s", ", ".join(type(p).__name__ for p in chosen))
    return chosen


def _load(spec: str) -> list[TracingProcessor]:
    factory = import_factory(spec, "BOT_TRACE_PROCESSORS", TracingConfigError)
    try:
        made = factory()
    except Exception as exc:  # the operator's code: say so, without a traceback
        raise TracingConfigError(f"BOT_TRACE_PROCESSORS={spec} failed: {exc!r}") from exc
    found = list(made) if isinstance(made, list | tuple) else [made]
    for processor in found:
        if not isinstance(processor, TracingProcessor):
            raise TracingConfigError(
                f"BOT_TRACE_PROCESSORS={spec} gave {type(processor).__name__}, "
                "not a TracingProcessor"
            )
    return found


class JsonLogProcessor(TracingProcessor):
    """Finished traces and spans as one JSON line each on the `bot.traces` logger."""

    def __init__(self) -> None:
        self.out = logging.getLogger("bot.traces")

    def on_trace_start(self, trace: Trace) -> None:
        return

    def on_trace_end(self, trace: Trace) -> None:
        self._write(trace.export())

    def on_span_start(self, span: Span[Any]) -> None:
        return

    def on_span_end(self, span: Span[Any]) -> None:
        self._write(span.export())

    def _write(self, exported: dict[str, Any] | None) -> None:
        if exported:
            self.out.info("%s", json.dumps(exported, default=str, ensure_ascii=False))

    def shutdown(self) -> None:
        return

    def force_flush(self) -> None:
        return


def json_log() -> TracingProcessor:
    return JsonLogProcessor()
