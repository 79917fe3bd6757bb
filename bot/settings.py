"""Bot settings beyond storage, read from the environment."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from pydantic import Field
from pydantic.functional_validators import BeforeValidator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from storage.durations import parse_duration


def _split_ids(value: object) -> object:
    if isinstance(value, str):
        return frozenset(part for part in value.replace(",", " ").split() if part)
    return value


def _split_names(value: object) -> object:
    if isinstance(value, str):
        return tuple(part for part in value.replace(",", " ").split() if part)
    return value


UserIds = Annotated[frozenset[str], NoDecode, BeforeValidator(_split_ids)]
Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


class RuntimeSettings(BaseSettings):
    """`BOT_AGENT=module:function` names the agent factory; `BOT_MODEL` overrides the model
    name; `BOT_APPROVERS` / `BOT_ADMINS` are Slack user ids separated by commas or spaces."""

    model_config = SettingsConfigDict(env_prefix="BOT_", extra="ignore")

    agent: str = "bot.demo_agent:build_agent"
    model: str | None = None
    approvers: UserIds = frozenset()
    admins: UserIds = frozenset()
    history_items: int = Field(default=60, ge=2, description="session items sent to the model")
    max_turns: int = Field(default=20, ge=1)
    recovery_concurrency: int = Field(default=32, ge=1)
    turn_timeout: float = Field(
        default=300.0, gt=0, description="seconds one model turn (with its tools) may take"
    )
    tracing: bool = False
    trace_processors: Annotated[tuple[str, ...], NoDecode, BeforeValidator(_split_names)] = Field(
        default=(),
        description="`module:function` factories of trace processors that receive the traces "
        "instead of OpenAI's exporter (`openai` keeps that one too)",
    )
    model_retries: int = Field(
        default=3, ge=0, le=10, description="retries of a model call after a transient error"
    )
    model_retry_delay: float = Field(
        default=1.0, ge=0, le=30, description="seconds before the first retry; doubles, at most 15"
    )
    thread_context_messages: int = Field(
        default=15,
        ge=0,
        le=100,
        description="earlier thread messages given to the agent when mentioned mid-thread "
        "(the thread's first message and the most recent ones; 0: none)",
    )
    thread_context_chars: int = Field(
        default=12_000, ge=500, le=100_000, description="characters of earlier messages at most"
    )
    shutdown_grace: Duration = Field(
        default=timedelta(seconds=25),
        description="how long a graceful stop lets runs reach their next checkpoint "
        "(fits ECS's 30 s stop timeout)",
    )
