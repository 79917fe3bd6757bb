"""How much a model request may carry, and how much an input item weighs.

The budget is the model's context window in tokens: `BOT_CONTEXT_TOKENS` when set, else the
window the Agents SDK knows for the model (its table of OpenAI models), else a conservative
`UNKNOWN_WINDOW`. A third of it is left for the answer (a reasoning model's thinking counts
there too); instructions and tool schemas come out of the rest.

Sizes are estimated from the text, never counted with a tokenizer (none ships with the bot,
and one would cost CPU on every model request): UTF-8 bytes of the item as JSON, one token
per `BYTES_PER_TOKEN` of them. English runs at about four bytes a token and Chinese or
Japanese at about three, so the estimate errs on the large side; JSON keys count too. Files
are not text: an image counts as `IMAGE_BYTES`, a file's data as the bytes it decodes to
(a PDF a quarter of them). Everything here works in those estimated bytes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agents import Agent, FunctionTool
from agents.sandbox.capabilities.compaction import CompactionModelInfo

BYTES_PER_TOKEN = 3
UNKNOWN_WINDOW = 32_000  # tokens, for a model the SDK has no window for
ANSWER_SHARE = 3  # a third of the window is left for the answer
IMAGE_BYTES = 6_000  # an image: about 2,000 tokens at most at high detail
PDF_SHARE = 4  # a PDF counts as a quarter of its bytes (text and page images)
OTHER_TOOL_BYTES = 1_000  # a hosted or custom tool's definition
HANDOFF_BYTES = 400
MCP_SERVER_BYTES = 8_000  # its tools' schemas, unknown until listed
ITEM_OVERHEAD = 8  # separators and framing the JSON walk does not see
_DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def known_window(model: str | None) -> int | None:
    """The context window (tokens) the SDK knows for `model`, dated variants included."""
    if not model:
        return None
    name = model.rsplit("/", 1)[-1]  # "openai/gpt-4o", "litellm/openai/gpt-4o"
    for candidate in (name, _DATED.sub("", name)):
        found = CompactionModelInfo.maybe_for_model(candidate)
        if found is not None:
            return found.context_window
    return None


@dataclass(frozen=True)
class Budget:
    """A model's window, and what a request's input may weigh within it."""

    window: int  # tokens
    model: str | None = None

    @classmethod
    def for_model(cls, model: str | None, configured: int | None) -> Budget:
        return cls(configured or known_window(model) or UNKNOWN_WINDOW, model)

    @property
    def input_bytes(self) -> int:
        """What instructions, tool schemas and input items may weigh together."""
        return (self.window - self.window // ANSWER_SHARE) * BYTES_PER_TOKEN

    def halved(self) -> Budget:
        return Budget(max(self.window // 2, 1), self.model)

    def room(self, instructions: str | None, tools: int) -> int:
        """What the input items may weigh, once instructions and tools are counted."""
        return self.input_bytes - text_size(instructions or "") - tools


def model_name(agent: Agent[Any], configured: str | None) -> str | None:
    """The model a run of `agent` uses: `BOT_MODEL`, else the agent's own (a name, or a
    model object's `model` attribute; "" for one without a name), else the SDK's default."""
    if configured:
        return configured
    model = agent.model
    if isinstance(model, str):
        return model
    if model is not None:
        named = getattr(model, "model", None)
        return named if isinstance(named, str) else ""
    from agents.models import get_default_model

    return get_default_model()


def text_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "replace"))


def size_of(value: object) -> int:
    """Estimated bytes of an input item (or any part of one), as JSON."""
    if isinstance(value, str):
        return text_size(value) + 2
    if isinstance(value, Mapping):
        special = _part_size(value)
        if special is not None:
            return special
        return 2 + sum(len(str(k)) + 4 + size_of(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return 2 + sum(size_of(v) + 1 for v in value)
    return len(str(value)) + 1


def item_size(item: object) -> int:
    return size_of(item) + ITEM_OVERHEAD


def _part_size(part: Mapping[str, Any]) -> int | None:
    """A file or an image part weighs what the model reads of it, not its encoding."""
    kind = part.get("type")
    if kind == "input_image":
        return IMAGE_BYTES
    if kind == "input_file":
        data = part.get("file_data")
        if not isinstance(data, str) or not data.startswith("data:"):
            return IMAGE_BYTES  # a reference or an id: the bytes are put in later
        header, _, encoded = data.partition(",")
        decoded = len(encoded) * 3 // 4
        return decoded // PDF_SHARE if "application/pdf" in header else decoded
    return None


def tools_size(
    tools: Iterable[object], handoffs: int = 0, mcp_servers: int = 0, output_schema: bool = False
) -> int:
    """What the tool definitions sent with a request weigh, estimated."""
    total = handoffs * HANDOFF_BYTES + mcp_servers * MCP_SERVER_BYTES
    if output_schema:
        total += OTHER_TOOL_BYTES
    for tool in tools:
        if isinstance(tool, FunctionTool):
            total += (
                text_size(tool.name)
                + text_size(tool.description or "")
                + size_of(tool.params_json_schema)
                + 40
            )
        else:
            total += OTHER_TOOL_BYTES
    return total


def agent_tools_size(agent: Agent[Any]) -> int:
    """The tool definitions a request of `agent` carries, estimated from the agent itself
    (a filter is not given the list the SDK sends)."""
    output = agent.output_type is not None and agent.output_type is not str
    return tools_size(agent.tools, len(agent.handoffs), len(agent.mcp_servers), output)
