"""The words for which model the bot's agents run on, shared by the runtime (which decides,
`bot.runtime.model_access`) and local mode's stand-in (which says it on its page and in the
terminal, and imports nothing of the Agents SDK to do so)."""

from __future__ import annotations

import os
from collections.abc import Mapping

OFFLINE = "offline"  # BOT_MODEL=offline: the scripted offline model (`bot.offline_model`)
KEY = "OPENAI_API_KEY"


def runs_offline(environ: Mapping[str, str] = os.environ) -> bool:
    """The bot runs without OpenAI: `BOT_MODEL=offline`, or local mode without a key (which
    sets BOT_DEMO_MODEL=1). An agent that brings a scripted model of its own uses it then."""
    return environ.get("BOT_MODEL") == OFFLINE or environ.get("BOT_DEMO_MODEL") == "1"


def missing_key_text(names: list[str]) -> str:
    """One line for the operator, naming the variable and the offline option."""
    which = ", ".join(f"'{name}'" for name in names[:3]) + (" and others" if names[3:] else "")
    agents = "agents" if len(names) > 1 else "agent"
    return (
        f"{KEY} is not set, and {agents} {which} run{'s' * (len(names) == 1)} on OpenAI's "
        f"model: its runs stop until it is. Set {KEY}, or try the agent offline on a "
        f"scripted model with BOT_MODEL={OFFLINE} (docs/agents.md)"
    )
