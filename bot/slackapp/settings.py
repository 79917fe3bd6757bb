"""Slack settings, read from the environment."""

from __future__ import annotations

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SlackSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    bot_token: str = Field(validation_alias="SLACK_BOT_TOKEN", pattern=r"^xox[a-z]-")
    signing_secret: str | None = Field(default=None, validation_alias="SLACK_SIGNING_SECRET")
    app_token: str | None = Field(
        default=None, validation_alias="SLACK_APP_TOKEN", pattern=r"^xapp-"
    )
    api_url: str = Field(
        default="https://slack.com/api/",
        validation_alias=AliasChoices("SLACK_API_URL"),
        description="Web API base URL (a local stand-in in tests and local mode)",
    )
    port: int = Field(default=3000, validation_alias="PORT", ge=1, le=65535)
    host: str = Field(default="0.0.0.0", validation_alias="HOST")
    admin_command: str = Field(default="/agent-admin", validation_alias="BOT_ADMIN_COMMAND")
    resume_command: str = Field(default="/resume", validation_alias="BOT_RESUME_COMMAND")

    @model_validator(mode="after")
    def _mode_needs_its_secret(self) -> SlackSettings:
        if self.app_token is None and not self.signing_secret:
            raise ValueError("SLACK_SIGNING_SECRET is required in HTTP mode (no SLACK_APP_TOKEN)")
        if not self.api_url.endswith("/"):
            self.api_url += "/"
        return self

    @property
    def socket_mode(self) -> bool:
        return self.app_token is not None
