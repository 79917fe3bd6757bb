"""Decisions on calls a person must approve, by button or by reply, and the rules for them.

Who may decide: the user who started the run, or anyone in `BOT_APPROVERS`. A click names
its call; it counts while that call is still awaiting (whichever copy of the request was
clicked), and a late or repeated click is told who decided. While a run waits, a reply that
is only a decision word (`approve`, `yes`, `reject`, ...) from someone allowed decides every
pending call; from anyone else it is refused (privately) and not kept. Any other reply is
kept for the agent and answered after the run. Decision words while nothing awaits a
decision are ordinary messages."""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agents import Agent, RunState, ToolApprovalItem

from bot.runtime import applying_stops, state_checks
from bot.runtime.envelope import DecisionMade, DecisionRequest, Envelope, HeldMessage
from bot.runtime.outcomes import (
    ApprovalRequest,
    Decided,
    Notice,
    NoticeKind,
    Outcome,
    PendingCall,
    Refused,
    StatusReply,
)
from bot.runtime.pass_results import AwaitsDecision, Decisions, PassResult, Resume
from bot.runtime.request_context import state_document
from storage import Status

if TYPE_CHECKING:
    from bot.runtime.envelope import Entries
    from bot.runtime.serving_view import ServingView

Verdict = tuple[bool, str, str | None]  # approve, deciding user, reason
APPROVE_WORDS = frozenset({"approve", "approved", "yes", "y", "ok", "okay", "go ahead", "lgtm"})
REJECT_WORDS = frozenset({"reject", "rejected", "no", "n", "deny", "denied", "cancel", "stop"})


def reply_words(text: str) -> str:
    """A reply as a word to act on: without a leading mention of the bot, trailing
    punctuation or case."""
    words = re.sub(r"<@[A-Z0-9]+>", "", text)
    return re.sub(r"[\s.!,:;]+$", "", words.strip()).strip().lower()


def parse_decision(text: str) -> bool | None:
    """A plain reply while a run waits for approval: True to approve, False to reject, None
    when the text is not a decision word alone."""
    words = reply_words(text)
    if words in APPROVE_WORDS:
        return True
    if words in REJECT_WORDS:
        return False
    return None


def allowed(serving: ServingView, envelope: Envelope, user: str) -> bool:
    return user == envelope.started_by or user in serving.parts.settings.approvers


def who_may_decide(serving: ServingView, envelope: Envelope) -> str:
    approvers = sorted(serving.parts.settings.approvers - {envelope.started_by})
    names = [f"<@{envelope.started_by}>"] + [f"<@{user}>" for user in approvers]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def not_yours(serving: ServingView, envelope: Envelope) -> str:
    """What someone who may not decide is told, whether they clicked or replied."""
    return f"Only {who_may_decide(serving, envelope)} can decide this one."


def late_decision(envelope: Envelope | None, decision: DecisionRequest) -> str:
    """Why a click on a call that no longer awaits a decision changes nothing."""
    made = envelope.decided.get(decision.call_id) if envelope else None
    if made is None:
        return "That approval is no longer pending."
    return already(made)


def already(made: DecisionMade) -> str:
    if made.stopped:
        return f"That call was stopped by <@{made.user}> before it ran."
    verdict = "approved" if made.approved else "rejected"
    return f"That call was already {verdict} by <@{made.user}>."


def asking_agent(item: ToolApprovalItem, own: Agent[Any]) -> str | None:
    """The agent that asks for a call, when it is not the bot's own (`own`): a handoff's
    target, or an agent used as a tool (the SDK names the nested agent whose tool it is)."""
    name = getattr(item.agent, "name", None)
    return name if isinstance(name, str) and name != own.name else None


def approval_request(serving: ServingView, envelope: Envelope) -> ApprovalRequest:
    calls = [PendingCall(**c.model_dump(exclude={"human"})) for c in envelope.humans]
    return ApprovalRequest(
        key=serving.key,
        calls=calls,
        checkpoint_version=serving.version + 1,
        requested_by=envelope.started_by,
        approvers=sorted(serving.parts.settings.approvers - {envelope.started_by}),
    )


async def while_awaiting(
    serving: ServingView, envelope: Envelope, entries: Entries
) -> tuple[PassResult, ...]:
    """What arrived while the run waits for a decision: clicks and replies that decide,
    refused or kept for the agent. Returns what the serve is left with, in order."""
    awaiting = {call.call_id for call in envelope.humans}
    verdicts: dict[str, Verdict] = {}
    clicked: dict[str, str | None] = {}
    clicks: list[DecisionRequest] = []  # the clicks that decide (told if a stop overtakes them)
    held = list(envelope.held)
    asked = {call.call_id: call.asked_at for call in envelope.humans}
    for item, arrived in zip(entries.items, entries.arrived, strict=True):
        if isinstance(item, DecisionRequest):
            if item.call_id in verdicts:  # decided by an earlier click of this same pass
                approve, user, _ = verdicts[item.call_id]
                await serving.refuse(item, already(DecisionMade(approved=approve, user=user)))
            elif item.call_id not in awaiting:
                await serving.refuse(item, late_decision(envelope, item))
            elif not allowed(serving, envelope, item.user):
                await serving.refuse(item, not_yours(serving, envelope))
            else:
                verdicts[item.call_id] = (item.approve, item.user, item.reason)
                clicked[item.call_id] = item.request_message
                clicks.append(item)
            continue
        verdict = parse_decision(item.text)
        # A reply decides only requests that were in the thread when it was written.
        answered = [c for c in awaiting if _asked_before(asked.get(c), arrived)]
        if verdict is None:
            held.append(HeldMessage.of(item))
        elif not answered:
            await serving.emit_now(
                Refused(
                    key=serving.key,
                    user=item.user,
                    text="Your reply came before the current approval request; decide that "
                    "one with its buttons, or reply again.",
                )
            )
        elif allowed(serving, envelope, item.user):
            for call_id in answered:
                verdicts.setdefault(call_id, (verdict, item.user, None))
        else:
            await serving.emit_now(
                Refused(key=serving.key, user=item.user, text=not_yours(serving, envelope))
            )
    consume = entries.ids
    if verdicts and awaiting <= verdicts.keys():
        return (await _decided(serving, envelope, verdicts, clicked, held, consume, clicks),)
    kept: tuple[PassResult, ...] = ()
    reminded = False
    if consume or verdicts:
        kept = (await _keep(serving, envelope, verdicts, held, consume),)
    elif serving.remind:
        reminded = True
        names = ", ".join(f"`{call.tool_name}`" for call in envelope.humans)
        await serving.emit_now(
            StatusReply(
                key=serving.key,
                text=f"It is waiting for a decision on {names}: see the request in the "
                f"thread. {who_may_decide(serving, envelope)} can decide.",
            )
        )
    return (*kept, AwaitsDecision(envelope.started_by, reminded=reminded))


async def _decided(
    serving: ServingView,
    envelope: Envelope,
    verdicts: dict[str, Verdict],
    clicked: dict[str, str | None],
    held: list[HeldMessage],
    consume: list[str],
    clicks: list[DecisionRequest],
) -> PassResult:
    state = await state_checks.load_state(serving, envelope)
    if not isinstance(state, RunState):
        return state
    apply_decisions(state, verdicts)
    outcomes: list[Outcome] = [
        Decided(
            key=serving.key,
            call_id=call.call_id,
            tool_name=call.tool_name,
            arguments=call.arguments,
            agent=call.agent,
            request_message=clicked.get(call.call_id),
            approved=verdicts[call.call_id][0],
            user=verdicts[call.call_id][1],
            reason=verdicts[call.call_id][2],
        )
        for call in envelope.humans
    ]
    decided = dict(envelope.decided)
    decided |= {
        call_id: DecisionMade(approved=approve, user=user)
        for call_id, (approve, user, _) in verdicts.items()
    }
    if serving.stop_asked:  # a stop came with the decision: nothing of it runs
        who = serving.keeper.stop_by if serving.keeper else None
        for click in clicks:  # as a click read with the stop is told (see `applying_stops`)
            await serving.refuse(
                click,
                already(DecisionMade(approved=False, user=who, stopped=True))
                if who
                else "That call was stopped before it ran.",
            )
        return await applying_stops.stopped(serving, consume, decided=decided)
    # The decision is durable before anything runs: a crash from here on is recovered from
    # this checkpoint (status `running`), not asked again.
    approved = envelope.model_copy(
        update={
            "run_state": state_document(state),
            "held": held,
            "awaiting": [],
            "decided": decided,
        }
    )
    # Approved calls, and calls that needed no person and waited with them, run next.
    to_run = [c for c in envelope.awaiting if not c.human or verdicts[c.call_id][0]]
    await serving.commit(approved, consume=consume, outcomes=outcomes, arm=to_run)
    return Resume(decided, state, envelope.started_by, held, envelope.window)


async def _keep(
    serving: ServingView,
    envelope: Envelope,
    verdicts: dict[str, Verdict],
    held: list[HeldMessage],
    consume: list[str],
) -> PassResult:
    """Keep what arrived (and any partial decision) in a new checkpoint; the request in the
    thread stays valid (clicks name their call)."""
    state_doc = envelope.run_state
    decided = dict(envelope.decided)
    if verdicts:
        state = await state_checks.load_state(serving, envelope)
        if not isinstance(state, RunState):
            return state
        apply_decisions(state, verdicts)
        state_doc = state_document(state)
        decided |= {
            call_id: DecisionMade(approved=approve, user=user)
            for call_id, (approve, user, _) in verdicts.items()
        }
    kept = envelope.model_copy(
        update={
            "run_state": state_doc,
            "held": held,
            "decided": decided,
            "awaiting": [c for c in envelope.awaiting if not c.human or c.call_id not in verdicts],
        }
    )
    outcomes: list[Outcome] = []
    if len(held) > len(envelope.held):
        outcomes.append(
            Notice(
                key=serving.key,
                kind=NoticeKind.MESSAGE_KEPT,
                text="I kept your message and will answer it once the pending approval is decided.",
            )
        )
    await serving.commit(kept, consume=consume, outcomes=outcomes, status=Status.RUNNING)
    return Decisions(decided)


def _asked_before(asked: datetime | None, arrived: datetime) -> bool:
    return asked is None or asked <= arrived


def apply_decisions(state: RunState[Any], verdicts: dict[str, Verdict]) -> None:
    """Record each decision (approve, deciding user, reason) on the run state."""
    for item in state.get_interruptions():
        if item.call_id in verdicts:
            approve, _, reason = verdicts[item.call_id]
            if approve:
                state.approve(item)
            else:
                state.reject(item, rejection_message=reason)
