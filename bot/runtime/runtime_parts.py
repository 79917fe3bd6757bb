"""The runtime as its rooms see it: the members of `ConversationRuntime` that a serve
(`serving`, `serving_view`) and the operations kept in their own modules (`discarding`,
`recovery`) use. Typed against this protocol rather than the class, they need nothing of
`runtime`, which builds them: no import circle, and each says what it uses. Read-only
members are properties, so that a plain attribute of the class satisfies them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from agents import Agent, RunConfig
from agents.memory import SessionSettings

from bot.runtime.admission import Admission
from bot.runtime.admitting import Served
from bot.runtime.attachments import SharedFiles
from bot.runtime.context_source import ContextSource
from bot.runtime.context_window import ContextWindow
from bot.runtime.delivery import OutcomeSink
from bot.runtime.history_cache import HistoryCache
from bot.runtime.mcp_servers import McpServers
from bot.runtime.not_taken import NotTaken
from bot.runtime.outcomes import Outcome
from bot.runtime.progress import Progress
from bot.settings import RuntimeSettings
from storage import CheckpointMeta, Conversation, ConversationKey, Lease, PersonKey, Store
from storage.calls import StorageCalls


class RuntimeParts(Protocol):
    """What the runtime's rooms use of `ConversationRuntime`."""

    @property
    def settings(self) -> RuntimeSettings: ...
    @property
    def store(self) -> Store: ...
    @property
    def io(self) -> StorageCalls: ...
    @property
    def process(self) -> str: ...
    @property
    def agent(self) -> Agent[Any]: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def mcp(self) -> McpServers: ...
    @property
    def run_config(self) -> RunConfig: ...
    @property
    def session_settings(self) -> SessionSettings: ...
    @property
    def history(self) -> HistoryCache: ...
    @property
    def window(self) -> ContextWindow: ...
    @property
    def files(self) -> SharedFiles: ...
    @property
    def source(self) -> ContextSource: ...
    @property
    def sink(self) -> OutcomeSink | None: ...
    @property
    def progress(self) -> Progress: ...
    @property
    def not_taken(self) -> NotTaken: ...
    @property
    def admission(self) -> Admission: ...
    @property
    def draining(self) -> bool: ...
    @property
    def silent_before(self) -> datetime | None: ...

    def meta(self, *, finished: bool = False) -> CheckpointMeta: ...

    async def serve_under_lease(
        self,
        lease: Lease,
        record: Conversation,
        *,
        remind: bool = False,
        recovering: bool = False,
        unheld: bool = False,
        note: PersonKey | None = None,
    ) -> Served: ...

    async def serve_when_admitted(
        self, key: ConversationKey, person: str | None
    ) -> list[Outcome]: ...
