"""The environment of a bot process that a test or a benchmark starts: this process's, the
storage's, the stand-ins' addresses and what the caller adds, in one place, so that what
every child needs (loopback, the stand-in Slack's signing secret, no Socket Mode token, no
tracing upload) is said once."""

from __future__ import annotations

import os
from collections.abc import Mapping

from testkit.services import ROOT, free_port
from testkit.slack import SECRET


def child_bot_env(
    storage: Mapping[str, str],
    *,
    api_url: str | None = None,
    model_url: str | None = None,
    bot_token: str | None = "xoxb-test",
    port: int | str | None = None,
    **extra: str,
) -> dict[str, str]:
    """For `python -m bot serve` (or a module standing in for it): `api_url` is the Slack
    stand-in's base URL, `model_url` the scripted `/v1/responses` server's; no `bot_token`
    for a bot that installs through OAuth. `extra` comes last and wins."""
    env = {
        **os.environ,
        **storage,
        "PYTHONPATH": str(ROOT),
        "HOST": "127.0.0.1",
        "PORT": str(port if port is not None else free_port()),
        "SLACK_SIGNING_SECRET": SECRET,
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
    }
    if api_url is not None:
        env["SLACK_API_URL"] = f"{api_url}/api/"
    if model_url is not None:
        # Only a bot that talks to the scripted server names a model: BOT_MODEL overrides
        # every agent's own, so set without it a bench agent's in-process model went unused.
        env["OPENAI_BASE_URL"] = model_url
        env["BOT_MODEL"] = "gpt-scripted"
    else:
        env.pop("BOT_MODEL", None)
    if bot_token is not None:
        env["SLACK_BOT_TOKEN"] = bot_token
    env |= extra
    env.pop("SLACK_APP_TOKEN", None)
    return env
