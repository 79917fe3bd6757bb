"""The offline demo model: deterministic, no key, no network. It drives the demo agent's
tools so that pause, approval, restart and resume can be seen without an OpenAI account.
Used by local mode when OPENAI_API_KEY is not set (BOT_DEMO_MODEL=1). Streamed, it writes
its answer a word at a time (BOT_DEMO_WORD_DELAY seconds apart), as a real model would.

`DemoModel(responder=...)` drives another agent the same way (the examples in `examples/`
do): the responder reads the call (`user_text`, `tool_result`) and returns what the model
says, a message or a tool call."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import string
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents.items import ModelResponse
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseTextDeltaEvent

from bot.demo_clock import CITY_ZONES, city_key
from bot.runtime import split_author

HELP = (
    "(offline demo model) I can tell the time, say who is asking, say which files you "
    "shared, or file a ticket, which needs your approval. Try: `@agent file a ticket about the "
    "printer`, `@agent who am I?`, or `@agent what time is it in Oslo?`"
)
# A ticket is asked for by name ("file a ticket", "open a bug report"), not by "file".
_TICKET = re.compile(
    r"\bticket\b|\b(?:file|open|raise|report)\s+(?:a|an)\s+(?:bug|issue|incident)\b", re.I
)
_FILES = re.compile(r"\b(?:files?|attach\w*|pdfs?|images?|documents?|shared)\b", re.I)
_SHARED = re.compile(r"^\[shared ([^\]\n]+)\]", re.MULTILINE)
_AUTHOR = re.compile(r"^<@([A-Z0-9]+)> \(([^()\n]*)\): ")


def _items(call_input: Any) -> list[dict[str, Any]]:
    if isinstance(call_input, str):
        return [{"role": "user", "content": call_input}]
    return [item for item in call_input if isinstance(item, dict)]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


_IN_PLACE = re.compile(
    r"\bin\s+([^\W\d_][\w .'-]*?)\s*(?:right now|now|today|at the moment)?\s*[?.!]*$",
    re.IGNORECASE,
)


def city_asked(text: str) -> str:
    """The city a time question names, as the person wrote it: the words after a final
    "in" ("what time is it in Oslo?"), else a known city anywhere in the text ("Tokyo time
    please"); "UTC" when there is none."""
    phrase = _IN_PLACE.search(text)
    if phrase and city_key(phrase.group(1)) in CITY_ZONES:
        return phrase.group(1).strip()
    words = f" {city_key(text)} "
    known = [city for city in CITY_ZONES if f" {city} " in words]
    if known:
        return string.capwords(max(known, key=len))
    return phrase.group(1).strip() if phrase else "UTC"


Responder = Callable[[Any], Any]  # a model call -> what the model says (output items)


def user_text(call: Any) -> str:
    """The newest user message of the call's input, without its author's header."""
    users = [_text(i.get("content")) for i in _items(call.input) if i.get("role") == "user"]
    return split_author(users[-1])[1] if users else ""


def tool_result(call: Any) -> tuple[str, str] | None:
    """(tool name, output) when the input ends with a tool's output: the model is called
    back with what its call returned (a handoff's output included)."""
    items = _items(call.input)
    last = items[-1] if items else {}
    if last.get("type") != "function_call_output":
        return None
    names = {i.get("call_id"): i.get("name") for i in items if i.get("type") == "function_call"}
    return str(names.get(last.get("call_id")) or ""), output_text(last.get("output", ""))


def output_text(output: Any) -> str:
    """A tool's output as text: a string as it is; content parts (what an MCP tool returns,
    as the SDK passes it on: `input_text` / `text`, images, files, or such a list kept as
    JSON) as their text, an image or a file by what it is, never as a Python repr."""
    parts = output
    if isinstance(output, str):
        if not output.lstrip().startswith(("[", "{")):
            return output
        try:
            parts = json.loads(output)
        except ValueError:
            return output
    if isinstance(parts, dict):
        parts = [parts]
    if not isinstance(parts, list) or not all(_is_part(part) for part in parts):
        return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return "\n".join(_part_text(part) for part in parts)


_PARTS = {"input_text", "text", "input_image", "image", "input_file", "file"}


def _is_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") in _PARTS


def _part_text(part: dict[str, Any]) -> str:
    if part["type"] in ("input_text", "text"):
        return str(part.get("text", ""))
    if part["type"] in ("input_image", "image"):
        return "[an image]"
    return f"[a file: {part.get('filename') or 'unnamed'}]"


def rejected(output: str) -> bool:
    """The output the SDK gives the model for a call a person rejected."""
    lowered = output.lower()
    return "reject" in lowered or "not approved" in lowered


def call_tool(name: str, arguments: dict[str, Any]) -> list[Any]:
    """The model's answer: call `name` with `arguments` (a fresh call id)."""
    return [function_call(name, arguments, call_id=f"call_{uuid.uuid4().hex[:12]}")]


def say(text: str) -> list[Any]:
    return [assistant_message(text)]


def names(call: Any) -> dict[str, str]:
    """Who the call's messages name in their author headers: id -> name."""
    found: dict[str, str] = {}
    for item in _items(call.input):
        if item.get("role") == "user" and (head := _AUTHOR.match(_text(item.get("content")))):
            found[head.group(1)] = head.group(2)
    return found


def named(text: str, call: Any) -> str:
    """`text` with people as their names and places said plainly: a Markdown answer shows
    `<@U123>` as written, never as a mention."""
    known = names(call)
    text = re.sub(r"<@([A-Z0-9]+)>", lambda m: f"@{known.get(m.group(1), m.group(1))}", text)
    return re.sub(r"<#(D)?[A-Z0-9]+>", lambda m: "this DM" if m.group(1) else "this channel", text)


def shared_files(call: Any) -> list[str]:
    """The files shared in the conversation so far, as the notes name them."""
    users = [_text(i.get("content")) for i in _items(call.input) if i.get("role") == "user"]
    return [found for text in users for found in _SHARED.findall(text)]


def about_files(call: Any) -> str:
    shared = shared_files(call)
    if not shared:
        return (
            "(offline demo model) I see no file here yet: attach one with 📎 and ask again. "
            "With OPENAI_API_KEY set, the model reads images, PDFs and text files."
        )
    listed = "\n".join(f"- {name}" for name in shared)
    return (
        f"(offline demo model) You shared:\n{listed}\n\nI only see their names and sizes; "
        "with OPENAI_API_KEY set, the model reads what is in them."
    )


def respond(call: Any) -> Any:
    result = tool_result(call)
    if result is not None:
        tool, output = result
        if tool == "file_ticket":
            return say("OK, I did not file the ticket." if rejected(output) else f"Done: {output}")
        return say(named(output, call))
    text = user_text(call)
    lowered = text.lower()
    if not _TICKET.search(text) and (_FILES.search(text) or _SHARED.search(text)):
        return say(about_files(call))
    if _TICKET.search(text):
        about = re.search(r"about (.+?)[.?!]*$", text, re.IGNORECASE)
        title = (about.group(1) if about else text).strip()[:80] or "A ticket"
        return call_tool("file_ticket", {"title": title, "details": text})
    if "who am i" in lowered or "who is asking" in lowered:
        return call_tool("who_is_asking", {})
    if "time" in lowered:
        return call_tool("current_time", {"city": city_asked(text)})
    return say(HELP)


_WORDS = re.compile(r"\s*\S+\s*")


def words(text: str) -> list[str]:
    """`text` in pieces of one word each, spaces kept: joined, they are `text` again."""
    return _WORDS.findall(text) or [text]


class DemoModel(ScriptedModel):
    """`ScriptedModel` with an endless script: each call is answered by `responder` (the
    demo agent's `respond` unless told otherwise), after a short pause (BOT_DEMO_DELAY
    seconds) that makes a run visible, and interruptible."""

    def __init__(
        self,
        delay: float | None = None,
        word_delay: float | None = None,
        responder: Responder = respond,
    ) -> None:
        super().__init__()
        self.responder = responder
        self.delay = float(os.getenv("BOT_DEMO_DELAY", "1.5")) if delay is None else delay
        self.word_delay = (
            float(os.getenv("BOT_DEMO_WORD_DELAY", "0.05")) if word_delay is None else word_delay
        )

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        await asyncio.sleep(self.delay)
        self.enqueue(ModelStep.respond(self.responder))
        return await super().get_response(*args, **kwargs)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """The scripted events, with the answer's text split into one delta per word and
        the events numbered again in order."""
        await asyncio.sleep(self.delay)
        self.enqueue(ModelStep.respond(self.responder))
        number = itertools.count()
        async for event in super().stream_response(*args, **kwargs):
            if not isinstance(event, ResponseTextDeltaEvent):
                yield event.model_copy(update={"sequence_number": next(number)})
                continue
            for index, piece in enumerate(words(event.delta)):
                if index:
                    await asyncio.sleep(self.word_delay)
                yield event.model_copy(update={"delta": piece, "sequence_number": next(number)})
