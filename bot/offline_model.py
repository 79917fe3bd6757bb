"""The offline model for any agent: `BOT_MODEL=offline` runs every agent without a `Model` of
its own on it (no key, no network), so that an operator's own agent can be tried in local
mode, tools, approvals, handoffs and restarts included, before any account exists.

It understands one thing: a message that names one of the agent's tools calls it, and one
that names an agent it can hand off to (its name, or the handoff's tool name) hands off.

- `lookup tides` calls `lookup` with its one text argument set to "tides";
- `send_email to=bob@example.com body="see you at 3"` sets arguments by name (a JSON object
  in the message works too); a required argument left over takes the rest of the message
  when it is text, the first number in it when it is a number;
- a tool's output is answered as text ("`lookup`: ..."), MCP content included (its text
  parts; an image or a file by name), never as a Python or JSON structure; a call a person
  rejected is answered as not done;
- anything else is answered with the list of what it can call, and an example.

A tool that needs approval asks for it as with any model: the bot pauses the run and shows
the approval card. Streamed a word at a time like the demo's (`bot.demo_model.DemoModel`).
An agent that has a `Model` of its own keeps it (the demo agent and the examples bring their
own scripted ones)."""

from __future__ import annotations

import json
import re
from typing import Any

from agents import FunctionTool, Handoff
from agents.models.interface import Model, ModelProvider
from agents.testing import ModelCall

from bot.demo_model import (
    DemoModel,
    Responder,
    call_tool,
    rejected,
    say,
    tool_result,
    user_text,
)

PREFIX = "(offline model)"
_PAIR = re.compile(r"""([A-Za-z_]\w*)\s*=\s*("[^"]*"|'[^']*'|\S+)""")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def respond(call: ModelCall) -> Any:
    """What the offline model says to `call`: a tool call, a handoff, or text."""
    tools = {tool.name: tool for tool in call.tools if isinstance(tool, FunctionTool)}
    result = tool_result(call)
    if result is not None and result[0] in tools:
        name, output = result
        if rejected(output):
            return say(f"{PREFIX} I did not run `{name}`: {output}")
        return say(f"{PREFIX} `{name}`: {output}" if output.strip() else f"Done: `{name}`.")
    # A handoff's output (the previous agent's call) starts this agent on the same message;
    # it does not hand off again, so two agents never pass a message back and forth.
    text = user_text(call)
    handoffs = {} if result is not None else {h.tool_name: h for h in call.handoffs}
    named = _named(text, tools, handoffs)
    if named is None:
        return say(_help(tools, handoffs))
    name, schema = named
    return call_tool(name, arguments(text, name, schema))


def _named(
    text: str, tools: dict[str, FunctionTool], handoffs: dict[str, Handoff[Any, Any]]
) -> tuple[str, dict[str, Any]] | None:
    """The tool or handoff the message names (the longest name found), with its schema."""
    found: list[tuple[int, str, dict[str, Any]]] = []
    for name, tool in tools.items():
        if _mentions(text, name):
            found.append((len(name), name, tool.params_json_schema))
    for name, handoff in handoffs.items():
        if _mentions(text, name) or _mentions(text, handoff.agent_name):
            found.append((len(name), name, handoff.input_json_schema or {}))
    if not found:
        return None
    _, name, schema = max(found, key=lambda item: item[0])
    return name, schema


def _mentions(text: str, name: str) -> bool:
    """`name` as a word of `text`, its underscores as underscores or as spaces."""
    words = re.escape(name).replace("_", "[_ ]")
    return re.search(rf"(?<![\w-]){words}(?![\w-])", text, re.IGNORECASE) is not None


def arguments(text: str, name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments, read from the message as the module says; each of the
    schema's required properties gets a value of its type."""
    properties: dict[str, Any] = schema.get("properties") or {}
    given: dict[str, Any] = {}
    embedded = _OBJECT.search(text)
    if embedded:
        try:
            loaded = json.loads(embedded.group(0))
        except ValueError:
            loaded = None
        if isinstance(loaded, dict):
            given |= {key: value for key, value in loaded.items() if key in properties}
            text = text.replace(embedded.group(0), " ")
    for pair in _PAIR.finditer(text):
        key, raw = pair.group(1), pair.group(2).strip("\"'")
        if key in properties and key not in given:
            given[key] = _typed(raw, properties[key])
    rest = _PAIR.sub(" ", text)
    words = re.escape(name).replace("_", "[_ ]")
    rest = re.sub(rf"^.*?(?<![\w-]){words}(?![\w-])", " ", rest, count=1, flags=re.IGNORECASE)
    rest = " ".join(rest.split()).strip(" :,.?!")
    for key in schema.get("required") or []:
        if key not in given:
            given[key] = _default(rest, properties.get(key) or {})
    return given


def _types(prop: dict[str, Any]) -> list[str]:
    kind = prop.get("type")
    if isinstance(kind, list):
        return [str(k) for k in kind]
    if isinstance(kind, str):
        return [kind]
    return [t for option in prop.get("anyOf") or [] for t in _types(option)]


def _typed(raw: str, prop: dict[str, Any]) -> Any:
    kinds = _types(prop)
    try:
        if "integer" in kinds:
            return int(float(raw))
        if "number" in kinds:
            return float(raw)
    except ValueError:
        return raw
    if "boolean" in kinds:
        return raw.lower() in ("true", "yes", "1")
    return raw


def _default(rest: str, prop: dict[str, Any]) -> Any:
    """A value for a required argument the message did not name."""
    kinds = _types(prop)
    if prop.get("enum"):
        return prop["enum"][0]
    if "string" in kinds:
        return rest
    if "integer" in kinds or "number" in kinds:
        number = _NUMBER.search(rest)
        value = float(number.group(0)) if number else 0.0
        return int(value) if "integer" in kinds else value
    if "null" in kinds:
        return None
    if "boolean" in kinds:
        return False
    if "array" in kinds:
        return []
    if "object" in kinds:
        return {}
    return rest


def _help(tools: dict[str, FunctionTool], handoffs: dict[str, Handoff[Any, Any]]) -> str:
    if not tools and not handoffs:
        return (
            f"{PREFIX} I am a scripted stand-in for a real model (BOT_MODEL=offline), and "
            "this agent has no tools for me to call. Set OPENAI_API_KEY for a real model."
        )
    lines = [
        f"{PREFIX} I am a scripted stand-in for a real model (BOT_MODEL=offline): name one "
        "of these in your message and I call it; `name=value` sets an argument."
    ]
    lines += [f"- `{name}`: {_first_line(tool.description)}" for name, tool in tools.items()]
    lines += [f"- `{h.agent_name}` (a handoff)" for h in handoffs.values()]
    if tools:
        name, tool = next(iter(tools.items()))
        example = " ".join(
            f"{key}=…" for key in (tool.params_json_schema.get("required") or [])[:2]
        )
        lines.append(f"For example: `{name} {example}`".rstrip() + ".")
    return "\n".join(lines)


def _first_line(description: str) -> str:
    line = (description or "").strip().splitlines()
    return line[0] if line else "(no description)"


class OfflineModel(DemoModel):
    """The offline model: `respond` (an agent's tools called by name) unless given a
    `responder` of one's own (a model call -> what the model says; `bot.demo_model` has the
    pieces: `user_text`, `tool_result`, `call_tool`, `say`)."""

    def __init__(
        self,
        responder: Responder = respond,
        *,
        delay: float | None = None,
        word_delay: float | None = None,
    ) -> None:
        super().__init__(delay=delay, word_delay=word_delay, responder=responder)


class OfflineProvider(ModelProvider):
    """Every model name (an agent's own, or none) is the offline model."""

    def get_model(self, model_name: str | None) -> Model:
        return OfflineModel()
