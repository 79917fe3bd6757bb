"""Slack settings, read from the environment."""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SlackSettings(BaseSettings):
    """One workspace with `SLACK_BOT_TOKEN`; many (Slack's OAuth install flow, a token per
    workspace) with `SLACK_CLIENT_ID` and `SLACK_CLIENT_SECRET` instead."""

    model_config = SettingsConfigDict(extra="ignore")

    bot_token: str | None = Field(
        default=None, validation_alias="SLACK_BOT_TOKEN", pattern=r"^xox[a-z]-"
    )
    client_id: str | None = Field(default=None, validation_alias="SLACK_CLIENT_ID")
    client_secret: SecretStr | None = Field(default=None, validation_alias="SLACK_CLIENT_SECRET")
    token_rotation_minutes: int = Field(
        default=120,
        validation_alias="SLACK_TOKEN_ROTATION_MINUTES",
        ge=1,
        description="rotating installs: refresh a bot token this long before it expires",
    )
    signing_secret: str | None = Field(default=None, validation_alias="SLACK_SIGNING_SECRET")
    app_token: str | None = Field(
        default=None, validation_alias="SLACK_APP_TOKEN", pattern=r"^xapp-"
    )
    api_url: str = Field(
        default="https://slack.com/api/",
        validation_alias=AliasChoices("SLACK_API_URL"),
        description="Web API base URL (a local stand-in in tests and local mode)",
    )
    authorize_url: str | None = Field(
        default=None,
        validation_alias="SLACK_AUTHORIZE_URL",
        description="where the install link sends people (default: beside SLACK_API_URL)",
    )
    install_success_url: str | None = Field(
        default=None,
        validation_alias="SLACK_INSTALL_SUCCESS_URL",
        description="where a completed install sends the browser (default: the Slack app)",
    )
    port: int = Field(default=3000, validation_alias="PORT", ge=1, le=65535)
    host: str = Field(default="0.0.0.0", validation_alias="HOST")
    duplicate_check_seconds: float = Field(
        default=5.0,  # duplicates.RECHECK_SECONDS
        validation_alias="BOT_DUPLICATE_CHECK_SECONDS",
        gt=0,
        le=60,
        description="seconds after a redelivery's post before the thread is read again and "
        "a second copy deleted",
    )
    admin_command: str = Field(default="/agent-admin", validation_alias="BOT_ADMIN_COMMAND")
    resume_command: str = Field(default="/resume", validation_alias="BOT_RESUME_COMMAND")

    @model_validator(mode="after")
    def _mode_needs_its_secret(self) -> SlackSettings:
        if self.bot_token is None and not (self.client_id and self.client_secret):
            raise ValueError(
                "set SLACK_BOT_TOKEN (one workspace), or SLACK_CLIENT_ID and "
                "SLACK_CLIENT_SECRET (installs in many workspaces)"
            )
        if self.app_token is None and not self.signing_secret:
            raise ValueError("SLACK_SIGNING_SECRET is required in HTTP mode (no SLACK_APP_TOKEN)")
        if not self.api_url.endswith("/"):
            self.api_url += "/"
        return self

    @property
    def socket_mode(self) -> bool:
        return self.app_token is not None

    @property
    def many_workspaces(self) -> bool:
        """OAuth installs and a token per workspace; a bot token means one workspace."""
        return self.bot_token is None

    @property
    def install_authorize_url(self) -> str:
        """Slack's authorize page, on the host that serves the Web API (`.../api/` ->
        `.../oauth/v2/authorize`), unless set."""
        if self.authorize_url:
            return self.authorize_url
        base = self.api_url.removesuffix("/").removesuffix("/api")
        return f"{base}/oauth/v2/authorize"
