"""Agents and helpers for runtime tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from bot.runtime import (
    ApprovalRequest,
    ConversationRuntime,
    SharedFile,
    ThreadHistory,
    Unavailable,
    retry_safe,
    split_author,
)
from storage import Conversation, ConversationKey, Status, Store

KEY = ConversationKey(team="T9", channel="C9", thread_ts="1700000100.000100")


class SideEffects:
    """Counts tool executions in a file, outside any process that might be killed."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, name: str, arguments: dict[str, Any]) -> None:
        with self.path.open("a") as handle:
            handle.write(json.dumps({"tool": name, **arguments}) + "\n")

    def calls(self, name: str | None = None) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        rows = [json.loads(line) for line in self.path.read_text().splitlines()]
        return [row for row in rows if name is None or row["tool"] == name]


def build_agent(model: Any, effects: SideEffects, *, approval: bool = True) -> Agent[Any]:
    @function_tool
    def lookup(topic: str) -> str:
        """Read-only lookup."""
        effects.record("lookup", {"topic": topic})
        return f"facts about {topic}"

    @function_tool(needs_approval=approval)
    def send_email(to: str, body: str) -> str:
        """Send an email (a side effect)."""
        effects.record("send_email", {"to": to})
        return f"sent to {to}"

    return Agent(name="assistant", model=model, tools=[retry_safe(lookup), send_email])


def email_then_answer(
    call_id: str = "call-email", text: str = "Done: email sent."
) -> ScriptedModel:
    return ScriptedModel(
        [
            [function_call("send_email", {"to": "ana@example.com", "body": "hi"}, call_id=call_id)],
            [assistant_message(text)],
        ]
    )


@asynccontextmanager
async def running(rt: ConversationRuntime) -> AsyncIterator[ConversationRuntime]:
    """`rt`, closed on the way out (its MCP servers and background work stopped)."""
    try:
        yield rt
    finally:
        await rt.close()


async def asked(
    rt: ConversationRuntime, text: str = "email Ana", *, event_id: str = "E1", user: str = "U1"
) -> ApprovalRequest:
    """Sends `text` to a new run that pauses with one approval request, its only outcome."""
    [request] = await rt.handle_message(KEY, event_id=event_id, user=user, text=text)
    assert isinstance(request, ApprovalRequest), request
    return request


async def decide(
    rt: ConversationRuntime,
    request: ApprovalRequest,
    call_id: str,
    *,
    approve: bool = True,
    user: str = "U1",
    key: ConversationKey = KEY,
    **more: Any,
) -> list[Any]:
    """A click on `request`'s card: Approve (or Reject) `call_id` as `user`, against the
    checkpoint version the card was posted with. Its outcomes, typed loosely for tests that
    read the fields of the kinds they expect."""
    return await rt.decide(
        key,
        call_id=call_id,
        approve=approve,
        user=user,
        checkpoint_version=request.checkpoint_version,
        **more,
    )


def history(store: Store, key: ConversationKey = KEY) -> list[dict[str, Any]]:
    return [json.loads(text) for text in store.read_items(key).items]


def kinds(store: Store, key: ConversationKey = KEY) -> list[str | None]:
    return [item.get("type") or item.get("role") for item in history(store, key)]


def record_of(store: Store, key: ConversationKey = KEY) -> Conversation:
    """The conversation's record, which the caller knows exists."""
    record = store.get(key)
    assert record is not None, f"{key} has no record"
    return record


def settled(store: Store, key: ConversationKey) -> bool:
    """The thread is released idle with nothing left to deliver: no process or recovery
    sweep has anything more to post there."""
    state = store.get(key)
    return (
        state is not None
        and (state.status, state.lease_owner) == (Status.IDLE, None)
        and state.undelivered_from() is None
    )


def user_texts(call: Any) -> list[str]:
    """The user messages a model call was given, as the model reads them (attributed)."""
    items = (
        call.input if isinstance(call.input, list) else [{"role": "user", "content": call.input}]
    )
    texts = []
    for item in items:
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, list):
                content = " ".join(
                    str(p.get("text", "")) for p in content if p.get("type") == "input_text"
                )
            texts.append(str(content))
    return texts


def content_parts(call: Any, kind: str | None = None) -> list[dict[str, Any]]:
    """The content parts (text, images, files) of a model call's input items; with `kind`,
    only the parts of that type (`input_image`)."""
    return [
        part
        for item in call.input
        if isinstance(item, dict) and isinstance(item.get("content"), list)
        for part in item["content"]
        if kind is None or part.get("type") == kind
    ]


def after_a_tool(call: Any) -> bool:
    """The model is called back with a tool's output: the newest input item is one."""
    items = call.input if isinstance(call.input, list) else []
    return (
        bool(items)
        and isinstance(items[-1], dict)
        and items[-1].get("type") == "function_call_output"
    )


def last_user_text(call: Any) -> str:
    """The latest user message's own text, without its author (`<@U1>: `)."""
    texts = user_texts(call)
    return split_author(texts[-1])[1] if texts else ""


class FileSource:
    """A `ContextSource` that serves files from a dictionary (what Slack's downloads are to
    the runtime); no earlier messages, no names."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.downloads = 0
        self.shared = 0

    def share(self, data: bytes, mimetype: str = "image/png", name: str = "") -> SharedFile:
        self.shared += 1
        file_id = f"F{self.shared:06d}"
        self.files[file_id] = data
        return SharedFile(
            id=file_id, name=name or f"{file_id}.png", mimetype=mimetype, size=len(data), url="-"
        )

    async def earlier_messages(self, key: ConversationKey, before: str) -> ThreadHistory:
        return ThreadHistory()

    async def display_name(self, key: ConversationKey, user: str) -> str | None:
        return None

    async def download(self, key: ConversationKey, file: SharedFile, limit: int) -> bytes:
        self.downloads += 1
        if file.id not in self.files:
            raise Unavailable("it is gone")
        return self.files[file.id]


def echo_model(steps: int = 20, gate: asyncio.Event | None = None) -> ScriptedModel:
    """Answers every call with an echo of the latest user message (order-independent);
    with `gate`, only once it is set (runs wait inside the model until then)."""
    from agents.testing import ModelStep

    async def respond(call: Any) -> Any:
        if gate is not None:
            await gate.wait()
        return [assistant_message(f"echo: {last_user_text(call)}")]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(steps)])
