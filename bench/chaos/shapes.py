"""The fault shapes of issue 49, drawn from a fourth generator of the seed (`make_plan`), so
that a seed's other draws are what they were before them:

- a redelivered stop: an admin stops a thread's run (the Stop button, the reply `stop`, or
  Slack's own stop, `agent_session_stopped`), and Slack sends that same request again (same
  event id, `X-Slack-Retry-Num`; the same click) soon after, after the run ended, or while
  the thread's next run works;
- a redelivered uninstall: a second workspace is installed through the OAuth flow (the
  run's replicas then serve many workspaces), a conversation begins there, the workspace
  removes the app (`app_uninstalled` or `tokens_revoked`), Slack sends the event again,
  and now and then the workspace installs the app again, begins another conversation, and
  Slack sends the event once more;
- slow tools: a `pay` whose MCP server answers after the client's read timeout (not keyed:
  never sent again), or a keyed `charge` whose service answers after the tool's own client
  timeout (sent again with its key);
- an output guardrail trip: a wire that asks the payments agent to `reveal` what it did,
  whose answer its output guardrail withholds;
- a stale Home Discard: a thread waits for approval past the replicas' `BOT_STALE_AFTER`,
  an admin's Home tab lists it, the approval brings it back to life, and the admin clicks
  Discard with what the tab listed;
- unsigned slow requests: connections to `/slack/events` that send a bogus signature and
  their body slowly (or never finish it, or go away);
- `/resume` at the run cap: the replicas run with `BOT_MAX_RUNS` 1 or 2 (and no retry of a
  model call); a thread's request fails at the model (`(flaky)`: a 500 once), which
  interrupts its run; once the thread says so, another thread begins with a request the
  model ponders over (its run holds a slot), and the starter sends `/resume` while it
  works."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from bench.chaos.plan import RunPlan, Step, StopMoment, ThreadPlan

STALE_AFTER = 2.0  # seconds of the replicas' BOT_STALE_AFTER: a paused thread is stale then
SLOW = "(slow)"  # a request whose tool answers only after its client gave up waiting
REVEAL = "reveal"  # a wire whose answer the payments agent's output guardrail withholds
FLAKY = "(flaky)"  # a request the model fails once (a 500): its run is interrupted
StopVia = Literal["button", "reply", "session"]
Again = Literal["soon", "after_run", "next_run"]


@dataclass
class RedeliveredStop:
    """The admin stops the thread's run at `moment` (+`delay`), via `via`; Slack sends the
    same request again `again` (+`again_delay`)."""

    thread: int
    moment: StopMoment
    via: StopVia
    delay: float
    again: Again
    again_delay: float


@dataclass
class UninstallPlan:
    """In a workspace of its own: installed at `begin` s, a conversation begun, the app
    removed by `kind` `uninstall_after` s after that conversation's request was acked (or
    gave up), the event sent again `redeliver_after` s after its first delivery; with
    `reinstall`, installed again `reinstall_after` s after that, a second conversation
    begun, and the event sent once more `again_after` s after its request was acked."""

    kind: Literal["app_uninstalled", "tokens_revoked"]
    begin: float
    uninstall_after: float
    redeliver_after: float
    reinstall: bool
    reinstall_after: float
    again_after: float


@dataclass
class HomeDiscardPlan:
    """The thread's first approval waits past `STALE_AFTER`; an admin opens their Home tab
    then (the thread listed stale), and clicks Discard with what it listed `delay` s after
    the approval brought the thread back to life (`running`) or after its run answered
    (`answered`)."""

    thread: int
    when: Literal["running", "answered"]
    delay: float


@dataclass
class UnsignedPlan:
    """A connection to a replica's `/slack/events` at `at` s with a bogus signature, whose
    body trickles in over `seconds`: then `complete`d (a 401), never finished (`stall`: a
    408 after the bot's BODY_SECONDS), or `abandon`ed (closed by the client)."""

    at: float
    slot: int
    seconds: float
    ends: Literal["complete", "stall", "abandon"]


@dataclass
class ResumeAtCapPlan:
    """Two threads of their own: `thread`'s request fails at the model once; when the
    thread says its run was interrupted, the `holder` thread (`ThreadPlan.held`) begins
    with a request the model ponders over for `ponder` s, and `delay` s after the model got
    it, `thread`'s starter sends `/resume`. The replicas run with `BOT_MAX_RUNS`
    `max_runs`."""

    thread: int
    holder: int
    max_runs: int
    ponder: float
    delay: float


def draw_shapes(rng: random.Random, plan: RunPlan) -> None:
    """The fourth generator's shapes, added to `plan` (each its own draw, in this order)."""
    from bench.chaos.plan import (
        GRAPH_REQUESTS,
        PEOPLE,
        PONDER,
        STARTERS,
        WORDS,
        Decision,
    )

    used: set[int] = set()  # ids of steps a shape rewrote

    def plain(first_only: bool = False) -> list[tuple[ThreadPlan, Step]]:
        return [
            (thread, step)
            for thread in plan.threads
            for number, step in enumerate(thread.steps)
            if step.kind == "say"
            and not (step.burst or step.late or id(step) in used)
            and not step.text.startswith((*GRAPH_REQUESTS, "charge "))
            and (number == 0 or not first_only)
        ]

    def rewrite(step: Step, request: str) -> None:
        ponder = PONDER.search(step.text)
        step.text = f"{request}{ponder.group(0) if ponder else ''} #{step.tag}"
        used.add(id(step))

    if rng.random() < 0.25:  # slow tools
        found = plain()
        if found:
            _, step = rng.choice(found)
            amount = rng.randint(1, 99)
            if rng.random() < 0.6:
                rewrite(step, f"pay {amount} to {rng.choice(PEOPLE)} {SLOW}")
            else:
                rewrite(step, f"charge {amount} {SLOW}")
    if rng.random() < 0.25:  # an output guardrail trip
        found = plain()
        if found:
            _, step = rng.choice(found)
            rewrite(step, f"wire {rng.randint(1, 99)} to {rng.choice(PEOPLE)} and {REVEAL} it")
    if rng.random() < 0.3:  # a redelivered stop
        thread = rng.choice(plan.threads)
        moments: list[StopMoment] = ["working", "finishing"]
        if _asks_approval(thread):
            moments += ["card", "approved"]
        moment = rng.choice(moments)
        via: StopVia = rng.choice(("button", "reply", "session"))
        again: Again = rng.choice(("soon", "after_run", "next_run"))
        delay = rng.uniform(0.2, 1.2) if moment == "working" else rng.uniform(0.0, 0.3)
        plan.redelivered_stops.append(
            RedeliveredStop(
                thread.index,
                moment,
                via,
                round(delay, 3),
                again,
                round(rng.uniform(0.1, 1.0), 3),
            )
        )
        first = thread.steps[0]
        if moment == "working" and not PONDER.search(first.text):
            first.text = first.text.replace(" #", f" (ponder {rng.uniform(1.5, 2.5):.1f}s) #", 1)
    if rng.random() < 0.2:  # a stale Home Discard
        found = [
            (thread, step)
            for thread, step in plain(first_only=True)
            if not thread.decisions[0].late
            and not thread.stops
            and all(stop.thread != thread.index for stop in plan.redelivered_stops)
        ]
        if found:
            thread, step = rng.choice(found)
            if not step.text.startswith("transfer "):
                rewrite(step, f"transfer {rng.randint(1, 99)} to {rng.choice(PEOPLE)}")
            used.add(id(step))
            # Decided once the thread is stale and listed so (the tab is opened before).
            thread.decisions[0] = Decision(
                approve=True,
                via="button",
                by=thread.starter,
                delay=round(STALE_AFTER + rng.uniform(2.0, 3.0), 3),
            )
            when: Literal["running", "answered"] = rng.choice(("running", "answered"))
            delay = rng.uniform(0.0, 0.3) if when == "running" else rng.uniform(0.0, 1.0)
            plan.home_discards.append(HomeDiscardPlan(thread.index, when, round(delay, 3)))
    if rng.random() < 0.25:  # unsigned slow requests
        for _ in range(rng.randint(2, 5)):
            ends: Literal["complete", "stall", "abandon"] = rng.choice(
                ("complete", "complete", "stall", "abandon")
            )
            seconds = rng.uniform(6.0, 7.0) if ends == "stall" else rng.uniform(0.5, 4.0)
            plan.unsigned.append(
                UnsignedPlan(
                    round(rng.uniform(0.2, 5.0), 2),
                    rng.randrange(plan.replicas),
                    round(seconds, 2),
                    ends,
                )
            )
    if rng.random() < 0.15:  # a redelivered uninstall
        plan.uninstall = UninstallPlan(
            kind=rng.choice(("app_uninstalled", "tokens_revoked")),
            begin=round(rng.uniform(0.2, 1.5), 2),
            uninstall_after=round(rng.uniform(0.2, 1.5), 2),
            redeliver_after=round(rng.uniform(0.2, 1.5), 2),
            reinstall=rng.random() < 0.7,
            # Within the bot's 5 s leeway for clocks: only the event's id tells the
            # redelivery from an uninstall of this installation.
            reinstall_after=round(rng.uniform(0.1, 1.5), 2),
            again_after=round(rng.uniform(0.0, 1.0), 2),
        )
    # `/resume` at the run cap; not in an expiry run: a thread waiting for a slot does not
    # touch its state, and behind a cap of 1 the wait can pass a 5 s TTL (no real one).
    # Two threads of their own: the other threads' steps stay as they were.
    if rng.random() < 0.3 and plan.state_ttl is None:
        interrupted, holding = len(plan.threads), len(plan.threads) + 1
        starter = rng.choice(STARTERS)
        flaky = f"s{plan.seed}t{interrupted}m0"
        plan.threads.append(
            _one_ask(
                interrupted,
                rng.choice(plan.channels),
                starter,
                round(rng.uniform(0.0, 1.0), 3),
                f"hello {rng.choice(WORDS)}? {FLAKY} #{flaky}",
                flaky,
            )
        )
        holder = next(person for person in STARTERS if person != starter)
        ponder = round(rng.uniform(2.5, 3.5), 2)
        held = f"s{plan.seed}t{holding}m0"
        plan.threads.append(
            _one_ask(
                holding,
                rng.choice(plan.channels),
                holder,
                0.0,
                f"hello {rng.choice(WORDS)}? (ponder {ponder}s) #{held}",
                held,
                held=True,
            )
        )
        plan.resume_at_cap = ResumeAtCapPlan(
            interrupted, holding, rng.choice((1, 1, 2)), ponder, round(rng.uniform(0.0, 0.6), 3)
        )


def _one_ask(
    index: int,
    channel: str,
    person: str,
    pause: float,
    text: str,
    tag: str,
    *,
    held: bool = False,
) -> ThreadPlan:
    """A thread of one mention by `person`, whose approval they give by its button."""
    from bench.chaos.plan import Decision, Step, ThreadPlan

    return ThreadPlan(
        index,
        channel,
        person,
        [Step("say", pause, text, tag, person, mention=True)],
        [Decision(True, "button", person, 0.5)],
        held=held,
    )


def _asks_approval(thread: ThreadPlan) -> bool:
    from bench.chaos.plan import APPROVAL_REQUESTS

    return any(s.kind == "say" and s.text.startswith(APPROVAL_REQUESTS) for s in thread.steps)
