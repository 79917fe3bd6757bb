"""Bot settings beyond storage, read from the environment."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from pydantic import Field, SecretStr
from pydantic.functional_validators import BeforeValidator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bot.capacity import default_max_runs
from storage.config import parse_duration


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
    history_items: int = Field(
        default=60,
        ge=2,
        description="session items read for a run at most: what the model is given of the "
        "history is then chosen by size (`context_tokens`)",
    )
    context_tokens: int | None = Field(
        default=None,
        ge=1_000,
        description="the model's context window in tokens (default: the window the Agents SDK "
        "knows for the model, else 32,000); a third is left for the answer",
    )
    summaries: bool = Field(
        default=True,
        description="earlier turns that leave the model's window are summed up by the model "
        "(off: they are left out, with a note saying how many)",
    )
    summary_timeout: float = Field(
        default=30.0,
        gt=0,
        le=300,
        description="seconds a summary may take before a run goes on without it",
    )
    max_turns: int = Field(default=20, ge=1)
    recovery_concurrency: int = Field(default=32, ge=1)
    max_runs: int = Field(
        default_factory=default_max_runs,
        ge=1,
        description="runs served at once per replica; more wait, queued in arrival order "
        "(default: 32 per core, at least 4, at most what half the memory holds at 8 MB each)",
    )
    turn_timeout: float = Field(
        default=300.0, gt=0, description="seconds one model turn (with its tools) may take"
    )
    checkpoint_interval: float = Field(
        default=10.0,
        ge=0,
        description="seconds of harmless work (model turns, retry-safe tools) a run does "
        "before it checkpoints at the end of the turn in progress; a side-effecting call is "
        "always checkpointed before it runs (0: after every turn)",
    )
    idempotent_attempts: int = Field(
        default=3,
        ge=1,
        le=10,
        description="times a keyed (`idempotent`) call may be started in all, when its outcome "
        "is unknown after a crash, a timeout or a lost connection; past them it is reported "
        "as outcome unknown",
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
    stale_after: Duration = Field(
        default=timedelta(days=1),
        description="how long a paused, interrupted or set-aside conversation is idle before "
        "it counts as stale: admins' Home tab lists it with Discard (which checks it again), "
        "and `/agent-admin list stale` lists it unless told another age",
    )
    mcp_check_interval: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="seconds between checks that each MCP server still answers (one that "
        "dropped is reconnected at once, then with backoff up to 30 s)",
    )


class ProcessSettings(BaseSettings):
    """What `python -m bot` reads before anything else: the log level, and what chooses its
    mode (local mode, one workspace, many workspaces) and local mode's ports. With
    `StorageSettings`, `RuntimeSettings` and the Slack layer's `SlackSettings` it is all
    the process reads from the environment."""

    model_config = SettingsConfigDict(extra="ignore")

    log_level: str = Field(default="INFO", validation_alias="LOG_LEVEL")
    slack_bot_token: SecretStr | None = Field(default=None, validation_alias="SLACK_BOT_TOKEN")
    slack_client_id: str | None = Field(default=None, validation_alias="SLACK_CLIENT_ID")
    slack_client_secret: SecretStr | None = Field(
        default=None, validation_alias="SLACK_CLIENT_SECRET"
    )
    slack_api_url: str = Field(default="https://slack.com/api/", validation_alias="SLACK_API_URL")
    openai_api_key: SecretStr | None = Field(default=None, validation_alias="OPENAI_API_KEY")
    # Local mode checks its ports itself, to name the variable in a one-line error.
    port: str = Field(default="", validation_alias="PORT")
    local_bot_port: str = Field(default="", validation_alias="BOT_LOCAL_BOT_PORT")
    local_oauth: bool = Field(default=False, validation_alias="BOT_LOCAL_OAUTH")

    @property
    def bot_token(self) -> str:
        return self.slack_bot_token.get_secret_value() if self.slack_bot_token else ""

    @property
    def client_secret(self) -> str:
        return self.slack_client_secret.get_secret_value() if self.slack_client_secret else ""

    @property
    def many_workspaces(self) -> bool:
        """A client id and secret: installs in many workspaces (OAuth)."""
        return bool(self.slack_client_id and self.client_secret)

    @property
    def serves_slack(self) -> bool:
        return bool(self.bot_token) or self.many_workspaces

    @property
    def demo_model(self) -> bool:
        """No OpenAI key: local mode's offline demo model."""
        return not (self.openai_api_key and self.openai_api_key.get_secret_value())

    @property
    def api_url(self) -> str:
        return self.slack_api_url.rstrip("/") + "/"
