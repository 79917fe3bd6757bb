"""Storage settings, read from `BOT_*` environment variables, the durations they are written
in (`30s`, `15m`, `12h`, `7d`; a bare number means seconds), and the store they open."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from storage.base import Store

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# ASCII digits only: `\d` (and `float`) take any script's digits.
_PATTERN = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)


def parse_duration(text: str | int | float | timedelta) -> timedelta:
    if isinstance(text, timedelta):
        return text
    if isinstance(text, int | float):
        return timedelta(seconds=text)
    match = _PATTERN.match(text)
    if not match:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 15m, 12h, 7d)")
    number, unit = match.groups()
    seconds = float(number) * _UNITS[(unit or "s").lower()]
    if seconds <= 0:
        raise ValueError(f"duration must be positive: {text!r}")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0 and seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


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


def store_options(settings: StorageSettings) -> dict[str, Any]:
    return {
        "lease_duration": timedelta(seconds=settings.lease_seconds),
        "lease_skew": timedelta(seconds=settings.lease_skew_seconds),
        "state_ttl": settings.state_ttl,
        "tombstone_ttl": settings.tombstone_ttl,
        "backlog_limit": settings.backlog_limit,
        "event_ttl": settings.event_ttl,
        "claim_ttl": settings.claim_ttl,
        "status_shards": settings.status_shards,
    }


def open_store(settings: StorageSettings | None = None) -> Store:
    settings = settings or StorageSettings()
    if settings.backend == "aws":
        from storage.aws import AwsStore

        assert settings.table and settings.bucket  # checked by StorageSettings
        return AwsStore(settings.table, settings.bucket, **store_options(settings))
    from storage.local import LocalStore

    return LocalStore(settings.data_dir, **store_options(settings))
