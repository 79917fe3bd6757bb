"""What a tool may know about the request it serves: the run context every run gets
(`RunContextWrapper[RequestContext]`; a tool declares `ctx: RunContextWrapper[RequestContext]`
or `ctx: ToolContext[RequestContext]` as its first parameter and reads `ctx.context`).

It is rebuilt by the runtime each time a run starts, resumes or continues, from what the
runtime holds durably and checks: the conversation's key, who started the run and the
decisions recorded in the checkpoint's envelope. The copy the SDK writes into its run state
is for reading only (debugging); it is never the one a resumed run uses (`for_restore`)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from agents import RunContextWrapper, RunState

from storage import ConversationKey

if TYPE_CHECKING:
    from bot.runtime.envelope import DecisionMade


@dataclass(frozen=True)
class RequestContext:
    """Where (team, channel, thread) and who: `user` started this run (the person whose
    message it answers); `approvals` names who approved each call a person approved;
    `generation` is the conversation's (a thread used again after its state expired starts
    a new one, with a fresh tool ledger)."""

    team: str
    channel: str
    thread_ts: str
    user: str
    approvals: Mapping[str, str] = field(default_factory=dict)
    enterprise: str | None = None
    generation: int = 0

    def approved_by(self, call_id: str) -> str | None:
        """Who approved the call `call_id`; None when no person had to (or did)."""
        return self.approvals.get(call_id)

    def idempotency_key(self, call_id: str) -> str:
        """A key for the call `call_id` to send to a service that deduplicates by it: the
        same however often the call is attempted (after a crash, on another replica, on
        `/resume`), and different for every other call (another thread, workspace, call, or
        generation of the conversation). It is made of what the tool ledger knows the call
        by, so that a call the ledger runs as new is new to the service too: a provider that
        numbers calls per conversation gives a call after an expiry the id of an old one.
        27 URL-safe characters (Stripe allows 255)."""
        where = ":".join(
            part for part in (self.enterprise, self.team, self.channel, self.thread_ts) if part
        )
        # Generation 0 (rows written before generations) keeps the key it always had.
        scope = f"{where}|g{self.generation}" if self.generation else where
        digest = hashlib.blake2b(f"{scope}|{call_id}".encode(), digest_size=18).digest()
        return "sb-" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def request_context(
    key: ConversationKey, started_by: str, decided: Mapping[str, DecisionMade], generation: int
) -> RequestContext:
    return RequestContext(
        team=key.team,
        channel=key.channel,
        thread_ts=key.thread_ts,
        user=started_by,
        approvals={call_id: made.user for call_id, made in decided.items() if made.approved},
        enterprise=key.enterprise,
        generation=generation,
    )


def for_restore(context: RequestContext) -> RunContextWrapper[RequestContext]:
    """The context a run state is restored with, instead of the one it carries."""
    return RunContextWrapper(context=context)


def _as_mapping(context: Any) -> Mapping[str, Any]:
    if isinstance(context, RequestContext):
        data = asdict(context)
        data["approvals"] = dict(context.approvals)
        return data
    return {}


def state_document(state: RunState[Any]) -> dict[str, Any]:
    """`state.to_json()`, with the context written as a plain mapping (for reading only)."""
    return state.to_json(context_serializer=_as_mapping)
