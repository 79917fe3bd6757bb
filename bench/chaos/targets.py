"""Where a chaos run's faults strike (`faults.Targets`): the replica that acks the next
delivery, the one running an approved tool, the one running a keyed call."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from bench.chaos.classify import approved, is_decision
from bench.chaos.facts import KeyedLog, thread_of_tag
from bench.chaos.faults import Cluster
from bench.chaos.model import ModelServer
from bench.chaos.people import ThreadState
from bench.chaos.plan import RunPlan
from bench.chaos.slack import TEAM, Deliverer, SlackSide
from bot.runtime import owner_pid
from storage import ConversationKey, Store


@dataclass(kw_only=True, eq=False)
class RunTargets:
    plan: RunPlan
    deliverer: Deliverer
    slack: SlackSide
    model: ModelServer
    cluster: Cluster
    store: Store
    threads: list[ThreadState]
    keyed: KeyedLog

    async def next_ack(self, within: float) -> str | None:
        return await self.deliverer.next_ack(within)

    async def tool_holder(self, within: float) -> str | None:
        """The replica running an approved tool: wait for the next "approved" decision in
        this run (its card edited to say it, or a post), then find its thread's lease
        holder."""
        channels = set(self.plan.channels)
        seen = len(self.slack.posts)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            for post in self.slack.posts[seen:]:
                if post.channel in channels and is_decision(post.args) and approved(post.args):
                    key = ConversationKey(
                        team=TEAM, channel=post.channel, thread_ts=post.thread_ts or post.ts
                    )
                    return await self._holder(key)
            seen = len(self.slack.posts)
        return None

    async def keyed_holder(self, within: float) -> str | None:
        """The replica running a keyed call: wait until the keyed service applies the next
        key of this run, then find its thread's lease holder."""
        prefix = f"call_s{self.plan.seed}t"
        seen = len(self.keyed)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            for request in self.keyed[seen:]:
                call_id = str(request["call_id"])
                made = self.model.calls.get(call_id)
                if not call_id.startswith(prefix) or request["repeated"] or made is None:
                    continue
                index = thread_of_tag(made.tag)
                key = self.threads[index].key if index is not None else None
                return await self._holder(key) if key is not None else None
            seen = len(self.keyed)
        return None

    async def _holder(self, key: ConversationKey) -> str | None:
        """The URL of the replica holding the thread's lease (the owner names the pid)."""
        record = await asyncio.to_thread(self.store.get, key)
        owner = (record.lease_owner or "") if record else ""
        pid = owner_pid(owner)
        for replica in self.cluster.replicas:
            if replica.process is not None and replica.process.pid == pid:
                return replica.url
        return None
