"""Storage settings, read from `BOT_*` environment variables."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from storage.durations import parse_duration

Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


class StorageSettings(BaseSettings):
    """`BOT_STORAGE` defaults to `aws` when `BOT_TABLE` is set, else `local`."""

    model_config = SettingsConfigDict(env_prefix="BOT_", extra="ignore")

    storage: Literal["local", "aws"] | None = None
    data_dir: Path = Path(".bot-data")
    table: str | None = None
    bucket: str | None = None
    lease_seconds: float = Field(default=15.0, gt=0)
    lease_skew_seconds: float = Field(default=1.0, ge=0)
    state_ttl: Duration = timedelta(days=7)
    tombstone_ttl: Duration = Field(
        default=timedelta(days=90),
        description="how long a conversation's record outlives its expired state, so that "
        "the thread can be told it expired",
    )
    backlog_limit: int = Field(
        default=1000,
        ge=1,
        description="messages a thread may have waiting for an answer; further ones are "
        "refused with a notice in the thread",
    )
    event_ttl: Duration = timedelta(days=1)
    claim_ttl: Duration = Field(
        default=timedelta(minutes=15),
        description="how long, at least, a thread remembers a kept event's id (Slack retries "
        "an event for about 5 minutes); claims live in the record, so shorter keeps it small",
    )
    status_shards: int = Field(
        default=16,
        ge=1,
        le=1000,
        description="partitions of the status index and counters (spreads their writes)",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_backend(cls, values: Any) -> Any:
        if isinstance(values, dict) and not values.get("storage"):
            values["storage"] = "aws" if values.get("table") else "local"
        return values

    @model_validator(mode="after")
    def _aws_needs_names(self) -> StorageSettings:
        if self.storage == "aws":
            missing = [name for name in ("table", "bucket") if not getattr(self, name)]
            if missing:
                names = ", ".join(f"BOT_{name.upper()}" for name in missing)
                raise ValueError(f"BOT_STORAGE=aws needs {names}")
        return self

    @property
    def backend(self) -> Literal["local", "aws"]:
        return self.storage or "local"
