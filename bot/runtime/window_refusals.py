"""A model service's "too large" refusal, and the one more try it gets.

OpenAI answers a request over the model's window with HTTP 400, code
`context_length_exceeded` (permanent for that input). Other providers say the same in
their own words: LiteLLM raises `ContextWindowExceededError`, Anthropic "prompt is too
long". The estimate the bot fits requests with (`window_budget`) is conservative, so this
should be rare: a model whose window is smaller than the table says, or text that weighs
more tokens than its bytes suggest. Then the request is fitted again into half the budget,
with the exact instructions and tools the request carries, and sent once more; a second
refusal, or a request that cannot be made to fit, is `TooLarge` (the thread is told).

It happens around the model call itself (`FittingModel`, made by `FittingProvider` for
every model the run's provider makes): nothing of the run is repeated, and the run state
the SDK holds is not touched (the SDK mutates a `RunState` given to it, so a retry from the
state would resume a consumed one). A model object an agent carries itself (not made by the
provider) is not wrapped: its refusal ends the request as `TooLarge` at once."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents import Handoff, Model, ModelProvider, ModelResponse, ModelSettings, Tool
from agents.agent_output import AgentOutputSchemaBase
from agents.items import TResponseInputItem, TResponseStreamEvent
from agents.models.interface import ModelTracing
from agents.retry import ModelRetryAdvice, ModelRetryAdviceRequest

from bot import metrics
from bot.runtime.fitting import TooLarge, fit
from bot.runtime.window_budget import Budget, tools_size

log = logging.getLogger(__name__)
TOO_LONG_WORDS = (
    "context_length_exceeded",
    "context window",
    "maximum context length",
    "prompt is too long",
    "input is too long",
    "too many tokens",
)


def _causes(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found and len(found) < 8:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def is_context_refusal(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is a model service refusing a request as larger
    than the model's window."""
    for cause in _causes(exc):
        if isinstance(cause, TooLarge):
            return True
        if getattr(cause, "code", None) == "context_length_exceeded":
            return True
        if type(cause).__name__ == "ContextWindowExceededError":  # LiteLLM's
            return True
        status = getattr(cause, "status_code", None)
        if status in (400, 413) and any(w in str(cause).lower() for w in TOO_LONG_WORDS):
            return True
    return False


def is_permanent_refusal(exc: BaseException) -> bool:
    """A model service's refusal of the request itself (400 or 422): sending it again as it
    is cannot succeed, unlike a timeout, a 429 or a 5xx."""
    return any(getattr(cause, "status_code", None) in (400, 422) for cause in _causes(exc))


class FittingModel(Model):
    """A model whose "too large" refusal is answered by fitting the request into half the
    budget and trying once more."""

    def __init__(self, inner: Model, budget: Budget) -> None:
        self.inner = inner
        self.budget = budget

    def __getattr__(self, name: str) -> Any:  # the inner model's other members
        return getattr(self.inner, name)

    async def close(self) -> None:
        await self.inner.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        await self.inner._cleanup_on_run_end(owner)

    def get_retry_advice(self, request: ModelRetryAdviceRequest) -> ModelRetryAdvice | None:
        return self.inner.get_retry_advice(request)

    def _smaller(
        self,
        refused: BaseException,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
    ) -> list[TResponseInputItem]:
        weight = tools_size(tools, len(handoffs), 0, output_schema is not None)
        room = self.budget.halved().room(system_instructions, weight)
        given = input if isinstance(input, list) else [{"role": "user", "content": input}]
        log.warning(
            "the model refused a request as too large (%s); fitting it into half the "
            "budget (%d tokens) and trying once more; BOT_CONTEXT_TOKENS may be too high",
            refused,
            self.budget.halved().window,
        )
        try:
            smaller: list[TResponseInputItem] = fit(given, room).input
        except TooLarge:
            metrics.CONTEXT_REFUSALS.labels(outcome="too_large").inc()
            raise
        metrics.CONTEXT_REFUSALS.labels(outcome="retried").inc()
        return smaller

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        def call(given: str | list[TResponseInputItem]) -> Any:
            return self.inner.get_response(
                system_instructions,
                given,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )

        try:
            return await call(input)  # type: ignore[no-any-return]
        except Exception as exc:
            if not is_context_refusal(exc) or isinstance(exc, TooLarge):
                raise
            refused = exc
        smaller = self._smaller(refused, system_instructions, input, tools, output_schema, handoffs)
        try:
            return await call(smaller)  # type: ignore[no-any-return]
        except Exception as exc:
            if not is_context_refusal(exc) or isinstance(exc, TooLarge):
                raise
            raise _refused_again() from exc

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        def call(given: str | list[TResponseInputItem]) -> AsyncIterator[TResponseStreamEvent]:
            return self.inner.stream_response(
                system_instructions,
                given,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )

        started = False
        try:
            async for event in call(input):
                started = True
                yield event
            return
        except Exception as exc:
            # A refusal comes before the first event; one after it is not ours to retry.
            if started or not is_context_refusal(exc) or isinstance(exc, TooLarge):
                raise
            refused = exc
        smaller = self._smaller(refused, system_instructions, input, tools, output_schema, handoffs)
        started = False
        try:
            async for event in call(smaller):
                started = True
                yield event
        except Exception as exc:
            if started or not is_context_refusal(exc) or isinstance(exc, TooLarge):
                raise
            raise _refused_again() from exc


def _refused_again() -> TooLarge:
    metrics.CONTEXT_REFUSALS.labels(outcome="too_large").inc()
    return TooLarge(0, 0, "the model refused it as too large even at half the budget")


class FittingProvider(ModelProvider):
    """Every model `inner` makes, wrapped in a `FittingModel` with the budget for its name."""

    def __init__(self, inner: ModelProvider, budget_for: Callable[[str | None], Budget]) -> None:
        self.inner = inner
        self.budget_for = budget_for

    def get_model(self, model_name: str | None) -> Model:
        return FittingModel(self.inner.get_model(model_name), self.budget_for(model_name))

    async def aclose(self) -> None:
        await self.inner.aclose()
