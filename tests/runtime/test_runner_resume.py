"""A full pause, approve and resume through the real `Runner`, with the state checkpointed
and the session committed atomically with it, and a fresh store standing in for a new
process on the way back."""

from __future__ import annotations

import json

from agents import Agent, Runner, RunResult, RunState, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from storage import (
    CheckpointMeta,
    Committed,
    Conversation,
    ConversationSession,
    Lease,
    Status,
    Store,
)
from testkit.runtime import KEY
from tests.conftest import Backend

META = CheckpointMeta(schema_version="1.21", agent_fingerprint="demo-v1")


def build_agent(model: ScriptedModel, sent: list[str]) -> Agent:
    @function_tool(needs_approval=True)
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    return Agent(name="assistant", model=model, tools=[send_email])


def commit_with_session(
    store: Store,
    lease: Lease,
    record: Conversation,
    result: RunResult,
    session: ConversationSession,
    status: Status,
) -> Committed:
    """The run's state and the items its session staged, committed together; the thread
    is released with `status`."""
    return store.commit(
        lease,
        state=result.to_state().to_json(),
        meta=META,
        expected_version=record.checkpoint_version,
        items=session.pending,
        base_seq=session.base_seq,
        status=status,
        release=True,
    )


async def test_pause_approve_resume_through_the_runner(backend: Backend) -> None:
    sent: list[str] = []
    model = ScriptedModel(
        [
            [function_call("send_email", {"to": "ana@example.com", "body": "hi"}, call_id="c1")],
            [assistant_message("Email sent to Ana.")],
        ]
    )
    agent = build_agent(model, sent)

    # Process 1: run until the tool asks for approval; commit state and session together.
    store = backend.open()
    lease, record = store.acquire(KEY, "p1", status=Status.RUNNING)
    session = ConversationSession(store, KEY, lease=lease, staged=True)
    result = await Runner.run(agent, "Email Ana please", session=session)
    assert [item.name for item in result.interruptions] == ["send_email"]
    assert sent == []
    done = commit_with_session(store, lease, record, result, session, Status.AWAITING_APPROVAL)
    assert done.next_seq == 2  # the user message and the function call

    # Process 2: a fresh store; load, verify, approve, resume.
    store2 = backend.open()
    lease2, record2 = store2.acquire(KEY, "p2", status=Status.RUNNING)
    assert record2.status is Status.RUNNING and record2.checkpoint is not None
    assert record2.checkpoint.agent_fingerprint == "demo-v1"
    state = await RunState.from_json(agent, store2.load_checkpoint(record2.checkpoint))
    for interruption in state.get_interruptions():
        state.approve(interruption)
    session2 = ConversationSession(store2, KEY, lease=lease2, staged=True)
    resumed = await Runner.run(agent, state, session=session2)
    assert resumed.final_output == "Email sent to Ana."
    assert sent == ["ana@example.com"]
    commit_with_session(store2, lease2, record2, resumed, session2, Status.IDLE)

    history = [json.loads(text) for text in store2.read_items(KEY).items]
    kinds = [item.get("type", item.get("role")) for item in history]
    assert kinds == ["user", "function_call", "function_call_output", "message"]
    assert history[2]["output"] == "sent to ana@example.com"
    final = store2.get(KEY)
    assert final is not None and final.checkpoint is not None
    assert (final.status, final.lease_owner, final.checkpoint.version) == (Status.IDLE, None, 2)
    model.assert_complete()
