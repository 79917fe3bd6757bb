"""What an operator's agent imports from the bot: `from bot.agent_api import ...`.

- `RequestContext`: who asked, where (team, channel, thread), who approved each call, and a
  stable idempotency key per call. A tool reads it as its run context:
  `ctx: ToolContext[RequestContext]` (or `RunContextWrapper[RequestContext]`) as its first
  parameter, then `ctx.context`.
- `retry_safe(tool)`: the tool may run again after a crash (read-only, or harmless twice);
  it runs without the ledger's pause. Any tool kind, or an MCP server (all its tools, or
  those named).
- `idempotent(tool)`: a side effect the service deduplicates by the call's idempotency key
  (`ctx.context.idempotency_key(ctx.tool_call_id)`): a call cut short by a crash, or that
  got no answer (a timeout, a lost connection), is run again with the same key and ends
  done or failed, not "outcome unknown". For an MCP server, per tool name, with the
  argument the key goes in.
- `UnguardedTool`: what loading an agent raises for a tool the bot cannot run at most once
  (a computer, a shell, a hosted MCP server...) unless it is marked `retry_safe`.
- `OfflineModel`, `runs_offline()`: the scripted offline model (no key, no network) that
  `BOT_MODEL=offline` gives every agent without a model of its own, and whether the bot runs
  offline (then, or in local mode without `OPENAI_API_KEY`), for an agent that brings a
  scripted model of its own (`OfflineModel(responder=...)`).

Every other tool is a side effect the bot runs at most once: it pauses before the call (the
call is checkpointed, and approved by a person when the tool's own `needs_approval` says so,
`BOT_APPROVERS` deciding along with the person who asked), is recorded as started, then
completed; after a crash, or a timeout, it is never run twice. See docs/agents.md."""

from bot.model_choice import runs_offline
from bot.offline_model import OfflineModel
from bot.runtime import RequestContext, UnguardedTool, idempotent, retry_safe

__all__ = [
    "OfflineModel",
    "RequestContext",
    "UnguardedTool",
    "idempotent",
    "retry_safe",
    "runs_offline",
]
