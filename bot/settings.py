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
    shutdown_grace: Duration = Field(
        default=timedelta(seconds=25),
        description="how long a graceful stop lets runs reach their next checkpoint "
        "(fits ECS's 30 s stop timeout)",
    )
