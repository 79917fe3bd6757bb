"""What the agent's container offers a person who opens it: a short greeting and a few
suggested prompts (Slack shows them as buttons that send the prompt's message). They come
from the agent's module, next to its factory (`BOT_AGENT=module:function`): an optional
`greeting` (text) and an optional `suggested_prompts` (a sequence of `(title, message)`
pairs or `{"title": ..., "message": ...}` mappings, or a function without arguments that
returns one). Without them, a plain greeting and one prompt."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)
PROMPTS_LIMIT = 4  # Slack shows at most four
TITLE_LIMIT = 75
MESSAGE_LIMIT = 1_000
GREETING_LIMIT = 300
GREETING = "Hi! Ask me anything here: each message you send starts its own conversation."


@dataclass(frozen=True)
class Prompt:
    title: str
    message: str

    def as_slack(self) -> dict[str, str]:
        return {"title": self.title, "message": self.message}


DEFAULT_PROMPTS = (Prompt("What can you do?", "What can you do, and what do you need from me?"),)


@dataclass(frozen=True)
class Suggestions:
    greeting: str = GREETING
    prompts: tuple[Prompt, ...] = DEFAULT_PROMPTS


class SuggestionsError(ValueError):
    pass


def load_suggestions(spec: str) -> Suggestions:
    """The greeting and prompts of the agent module `spec` names; the defaults for what it
    does not define. Raises `SuggestionsError` for one it defines wrongly (a configuration
    error, said at start)."""
    module_name = spec.partition(":")[0]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SuggestionsError(f"BOT_AGENT={spec}: {exc}") from exc
    greeting = getattr(module, "greeting", GREETING)
    if callable(greeting):
        greeting = greeting()
    if not isinstance(greeting, str) or not greeting.strip():
        raise SuggestionsError(f"{module_name}.greeting must be text")
    raw = getattr(module, "suggested_prompts", None)
    if raw is None:
        return Suggestions(greeting.strip()[:GREETING_LIMIT])
    prompts = tuple(_prompt(item, module_name) for item in _items(raw, module_name))
    if not prompts:
        raise SuggestionsError(f"{module_name}.suggested_prompts is empty")
    if len(prompts) > PROMPTS_LIMIT:
        log.warning(
            "%s.suggested_prompts: Slack shows %d; the rest are left out",
            module_name,
            PROMPTS_LIMIT,
        )
    return Suggestions(greeting.strip()[:GREETING_LIMIT], prompts[:PROMPTS_LIMIT])


def _items(raw: object, module_name: str) -> list[Any]:
    value = raw() if callable(raw) else raw
    if isinstance(value, str | bytes | Mapping) or not hasattr(value, "__iter__"):
        raise SuggestionsError(f"{module_name}.suggested_prompts must be a sequence of prompts")
    return list(value)


def _prompt(item: object, module_name: str) -> Prompt:
    if isinstance(item, Mapping):
        title, message = item.get("title"), item.get("message")
    elif isinstance(item, tuple | list) and len(item) == 2:
        title, message = item
    else:
        title = message = None
    if not (
        isinstance(title, str) and isinstance(message, str) and title.strip() and message.strip()
    ):
        raise SuggestionsError(
            f"{module_name}.suggested_prompts: each is (title, message) or "
            "{'title': ..., 'message': ...}, both text"
        )
    return Prompt(title.strip()[:TITLE_LIMIT], message.strip()[:MESSAGE_LIMIT])
