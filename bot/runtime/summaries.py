"""What a run is given of the thread's history, decided when the run starts, and the summary
of the earlier turns that stands in for what it is not given.

When a run starts (`open_window`), the history it will read is chosen from the session's
latest items after those the conversation's summary already sums up (`BOT_HISTORY_ITEMS`
of them at most; only those are read, so a run's read does not grow with the thread) by
size, newest first, in whole groups (`fitting.groups`). When every
item after the summary fits, the run reads them all. When some do not, or lie beyond the
items read, the model sums them up: the new summary folds the previous one in with the
items it now stands for, and the run reads only the newest items, up to half the room (or
half the items read), so that the next summary is needed only once as much again has been
said. The run is then given, ahead of its history, the summary; and when there is none for
them (summaries switched off, or the model failed to write one in `BOT_SUMMARY_TIMEOUT`),
a note saying how many earlier messages were left out.

A summary made here is not stored at once: the serve keeps it (`pending_summary`) for its
next checkpoint commit, which stores it atomically with the items and checkpoint of the run
it was made for (`Commit.summary`). A crash before that commit loses only the summary,
which the next run makes again; nothing is made twice once stored, and a summary made for
a run that failed before its commit is kept in memory and used again (`ContextWindow`).

The stored session items are never changed: the run reads them as the SDK wrote them (its
session limit set to the items chosen), and the summary reaches the model only through the
run's `call_model_input_filter` (`model_window`)."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents import Agent, Runner

from bot import metrics
from bot.runtime.envelope import RunWindow
from bot.runtime.fitting import SMALLEST, cut_text, groups, left_out_note, summary_note
from bot.runtime.model_window import MadeSummary, OpenWindow, RunView
from bot.runtime.run_options import for_run
from bot.runtime.window_budget import ITEM_OVERHEAD, agent_tools_size, item_size, text_size
from storage import SUMMARY_LIMIT, ConversationSession, Summary

if TYPE_CHECKING:
    from bot.runtime.serving_view import ServingView

log = logging.getLogger(__name__)
KEEP_SHARE = 2  # after a summary, the history given fills at most half of what it may
READ_FACTOR = 4  # items read to fold in at most, in `BOT_HISTORY_ITEMS`
DYNAMIC_INSTRUCTIONS = 8_000  # bytes assumed for instructions given as a function
SUMMARY_SHARE = 8  # a summary takes at most an eighth of the room
SUMMARY_INSTRUCTIONS = (
    "You write the running summary of a Slack thread in which people talk with an AI "
    "assistant. The assistant will be given your summary in place of the messages it sums "
    "up, so keep what it needs to carry on: who asked for what, decisions and why, facts, "
    "names and figures found, what tools were called and what they returned (briefly), and "
    "what is promised or still open. Fold the summary so far and the new messages into one "
    "summary, at most {words} words, in plain sentences or short bullet points. Write only "
    "the summary."
)


@dataclass(frozen=True)
class HistoryPlan:
    """Which session items a run is given: from `start` on. `fold`: the items to sum up
    into a new summary (when the run gets one, it reads from its end); `left_out`: items
    before `start` that no summary stands for."""

    start: int
    fold: tuple[int, int] | None = None
    left_out: int = 0


def plan_history(
    items: Sequence[Any],
    *,
    next_seq: int,
    floor: int,
    summary_through: int,
    fixed: int,
    room: int,
    limit: int,
    summarize: bool,
) -> HistoryPlan:
    """`items` are the session's latest (oldest first, the last one `next_seq - 1`), as
    stored (JSON text) or parsed; `fixed` what the run is given besides its history (its
    messages, the notes), `room` what its input may weigh. A pure function: the same
    history, summary and budget, the same plan. Items are parsed only when not all fit."""
    uncovered = max(summary_through, floor)
    first = next_seq - len(items)
    given = items[max(uncovered - first, 0) :]
    offset = next_seq - len(given)
    sizes = [_weight(item) for item in given]
    if first <= uncovered and sum(sizes) <= room - fixed:  # the common case: all of it
        return HistoryPlan(start=uncovered)
    candidates = [json.loads(item) if isinstance(item, str) else item for item in given]
    spans = groups(candidates)
    fits_from = offset + _newest_within(spans, sizes, room - fixed, len(candidates))
    if fits_from <= uncovered:
        return HistoryPlan(start=uncovered)
    if not summarize:
        return HistoryPlan(start=fits_from, left_out=fits_from - uncovered)
    keep = _newest_within(spans, sizes, (room - fixed) // KEEP_SHARE, limit // KEEP_SHARE)
    start = max(offset + keep, fits_from)
    return HistoryPlan(start=start, fold=(uncovered, start))


def _weight(item: Any) -> int:
    """An item's estimated bytes; a stored item's are those of its text (compact JSON)."""
    return text_size(item) + ITEM_OVERHEAD if isinstance(item, str) else item_size(item)


def _newest_within(spans: list[tuple[int, int]], sizes: list[int], room: int, most: int) -> int:
    """Where the newest whole groups that weigh at most `room` (and number at most `most`
    items) begin."""
    begin, total = len(sizes), 0
    for start, end in reversed(spans):
        total += sum(sizes[start:end])
        if total > room or len(sizes) - start > most:
            break
        begin = start
    return begin


def summary_room(room: int) -> int:
    """Bytes a summary may take in a request (and characters it may have)."""
    return max(min(room // SUMMARY_SHARE, SUMMARY_LIMIT), 2_000)


# -- opening a run's window ------------------------------------------------------------


async def open_window(
    serving: ServingView, session: ConversationSession, given: list[Any], started_by: str
) -> OpenWindow:
    """What a fresh run starting with `given` is given of the history (see the module's
    docstring: the summary or note, the session items it reads), what its checkpoints say
    of it, and the summary it needed, when one was made."""
    parts, record = serving.parts, serving.record
    window = parts.window
    limit = parts.settings.history_items
    known = await window.summary_of(serving.storage_calls, record)
    through = known.through if known is not None else 0
    # Only the items after the summary can be given (or folded into the next one): however
    # long the thread, a run reads no more than those, and at most `limit`.
    unsummed = record.next_seq - max(through, record.session_floor)
    read, next_seq = await _latest(session, min(limit, unsummed), record.next_seq)
    room = window.budget_of(parts.agent).room(
        _instructions(parts.agent), agent_tools_size(parts.agent)
    )
    cap = summary_room(room)
    notes = item_size(left_out_note(10**6))
    if known is not None or parts.settings.summaries:
        notes += item_size(summary_note("x" * cap))
    fixed = sum(item_size(item) for item in given) + notes
    plan_for = functools.partial(
        plan_history,
        read,
        next_seq=next_seq,
        floor=record.session_floor,
        summary_through=through,
        fixed=fixed,
        room=room,
        limit=limit,
    )
    plan = plan_for(summarize=parts.settings.summaries)
    summary: Summary | None = known
    left_out, start = plan.left_out, plan.start
    made: Summary | None = None
    if plan.fold is not None:
        made = await _summary_for(serving, (read, next_seq), known, plan.fold, cap, started_by)
        if made is not None:
            summary = made
        else:  # the run goes on without it: what fits is given, the rest counted
            unfolded = plan_for(summarize=False)
            start, left_out = unfolded.start, unfolded.left_out
    text = summary.text if summary else None
    view = RunView(summary=text, left_out=left_out, reads=next_seq - start)
    through_now = summary.through if summary else 0
    return OpenWindow(view, RunWindow(summary_through=through_now, left_out=left_out), made)


async def _latest(session: ConversationSession, limit: int, next_seq: int) -> tuple[list[Any], int]:
    """The session's latest `limit` items as stored (JSON text, parsed only when needed),
    read now if the serve does not know them (then the run's own read of them, as many or
    fewer, is free), and the sequence number after them."""
    known = session.known
    if known is None or not known.covers(limit):
        items = await session.get_items(limit)
        known = session.known
        if known is None or not known.covers(limit):
            return items, next_seq
    return (known.items[-limit:] if limit else []), known.next_seq


async def resumed_view(serving: ServingView, window: RunWindow | None) -> RunView:
    """The view of a run continued from its checkpoint: the summary it started with."""
    if window is None:
        return RunView()
    summary = None
    if window.summary_through:
        found = await serving.parts.window.summary_of(serving.storage_calls, serving.record)
        if found is not None and found.through == window.summary_through:
            summary = found.text
    return RunView(summary=summary, left_out=window.left_out)


def _instructions(agent: Agent[Any]) -> str:
    """The agent's instructions, or as much as instructions given as a function may be."""
    given = agent.instructions
    if callable(given):
        return "x" * DYNAMIC_INSTRUCTIONS
    return given if isinstance(given, str) else ""


async def _summary_for(
    serving: ServingView,
    latest: tuple[list[Any], int],
    known: Summary | None,
    fold: tuple[int, int],
    cap: int,
    started_by: str,
) -> Summary | None:
    """The summary folding `known` and the items [fold): one made already (not yet stored),
    or a new one; None when the model could not write it in time."""
    parts, record = serving.parts, serving.record
    begin, end = fold
    made = parts.window.known(record)
    if made is not None and made.summary.through == end and made.base == begin:
        metrics.CONTEXT_SUMMARIES.labels(outcome="reused").inc()
        return made.summary
    read, next_seq = latest
    first = next_seq - len(read)
    unread = 0
    if begin >= first:
        items = [
            json.loads(i) if isinstance(i, str) else i for i in read[begin - first : end - first]
        ]
    else:  # some lie beyond the items read for the run: read them now
        wanted = min(next_seq - begin, parts.settings.history_items * READ_FACTOR)
        older = await serving.storage_calls(serving.store.read_items, serving.key, wanted)
        start = older.next_seq - len(older.items)
        unread = max(start - begin, 0)
        items = [json.loads(text) for text in older.items[max(begin - start, 0) : end - start]]
    try:
        async with asyncio.timeout(parts.settings.summary_timeout):
            text = await _write_summary(serving, known, items, unread, cap, started_by)
    except Exception:  # a model error, a timeout, a refusal: the run goes on without it
        log.warning("%s: no summary of items %d-%d", serving.key, begin, end, exc_info=True)
        metrics.CONTEXT_SUMMARIES.labels(outcome="failed").inc()
        return None
    summary = Summary(through=end, text=text)
    parts.window.remember(record, MadeSummary(summary, base=begin))
    metrics.CONTEXT_SUMMARIES.labels(outcome="made").inc()
    return summary


async def _write_summary(
    serving: ServingView,
    known: Summary | None,
    items: list[Any],
    unread: int,
    cap: int,
    started_by: str,
) -> str:
    parts = serving.parts
    words = max(cap // 7, 100)
    writer: Agent[Any] = Agent(
        name="thread summary",
        instructions=SUMMARY_INSTRUCTIONS.format(words=words),
        model=parts.agent.model,
    )
    room = parts.window.budget_of(parts.agent).room(writer.instructions, 0)  # type: ignore[arg-type]
    prompt = transcript(known.text if known else None, items, unread, room * 3 // 4)
    config = for_run(parts.run_config, serving.key, started_by, summarizing=True)
    result = await Runner.run(writer, prompt, run_config=config, max_turns=1)
    text = str(result.final_output or "").strip()
    if not text:
        raise ValueError("the model wrote an empty summary")
    return cut_text(text, cap, "this summary")[:SUMMARY_LIMIT]


# -- the transcript a summary is written from ------------------------------------------


def transcript(previous: str | None, items: Sequence[Any], unread: int, room: int) -> str:
    """The summary so far and the items to fold in, as text within about `room` bytes:
    each line cut to its share, the oldest lines left out when even that is too much."""
    lines = [line for item in items if (line := _line(item))]
    share = max(room // max(len(lines), 1), SMALLEST * 2)
    lines = [cut_text(line, share, "this message") for line in lines]
    head = f"Summary so far:\n{previous}\n\n" if previous else ""
    total = text_size(head) + sum(text_size(line) + 1 for line in lines)
    dropped = 0
    while lines and total > room:
        total -= text_size(lines.pop(0)) + 1
        dropped += 1
    if unread or dropped:
        lines.insert(0, f"[{unread + dropped} earlier messages could not be included]")
    return f"{head}Messages to add (oldest first):\n" + "\n".join(lines)


def _line(item: Any) -> str:
    if not isinstance(item, dict):
        return ""
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role", "")
        if role not in ("user", "assistant"):
            return ""
        return f"{role}: {_text_of(item.get('content'))}"
    if kind == "function_call":
        return f"assistant called {item.get('name')}({item.get('arguments', '')})"
    if kind == "function_call_output":
        return f"the tool returned: {_text_of(item.get('output'))}"
    if kind == "reasoning":
        return ""
    return f"[{kind}]"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return str(content or "")
    parts = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif part.get("type") in ("input_image", "input_file"):
            parts.append(f"[file {part.get('filename') or 'image'}]")
    return " ".join(parts)
