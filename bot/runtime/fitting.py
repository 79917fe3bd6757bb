"""Fitting a model request into its window: a pure function of the items, the thread's
summary and the room the budget leaves (`window_budget`), so that the same history gives
the same request, before a restart and after.

What the model is given (never what is stored: the items passed in are the session's and the
run state's, and are not changed; a cut item is a copy):

- the run's own items whole: the messages that start it (the last run of user messages) and
  everything after them, with any tool call an output of theirs answers;
- the history before them chosen by size, newest first, in whole groups: a tool call never
  without its output nor an output without its call, a reasoning item with what follows it;
  an output whose call is not in the input at all is left out (the API refuses it);
- ahead of them a note with the summary of earlier turns, when there is one, and a note
  "[N earlier messages of this thread left out]" for what is neither summed up nor given;
- an item over its share of the room (`SHARE`) cut, head and tail kept, with a line saying
  how much was left out ("[… 391,000 characters of this tool's output left out]").

When the whole does not fit: older tool outputs of the history are cut down to a preview
first (as the SDK's `ToolOutputTrimmer` does), then history groups are left out, oldest
first, then the run's own tool outputs are cut to a preview, oldest first, then its other
items (and the summary); then all of them shorter still. What still does not fit (a run of
very many calls in a small window, instructions and tools that take up the window) raises
`TooLarge`.

The notes are developer messages at the head of the input; fitting an input that already
carries them (a retry with a smaller budget) keeps them and counts on from their number."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from agents import TResponseInputItem

from bot.runtime.window_budget import item_size, text_size

SHARE = 4  # an item may take a quarter of the room
PREVIEW = 2_000  # bytes a cut-down tool output (or run item) keeps at most
SMALLEST = 200  # no item is cut below this
NOTE_ROLE = "developer"
SUMMARY_HEAD = "Summary of this thread's earlier messages, which are not shown here:"
_LEFT_OUT = re.compile(r"^\[(\d+) earlier messages? of this thread left out\]$")
_TEXT_FILE = re.compile(r"^data:(text/[\w.+-]+|application/json)[^,]*;base64,")


class TooLarge(Exception):
    """The request cannot be made to fit: what the run needs is larger than the room."""

    def __init__(self, needed: int, room: int, why: str = "") -> None:
        super().__init__(f"the request needs ~{needed} bytes, the window leaves {room}: {why}")
        self.needed = needed
        self.room = room
        self.why = why


@dataclass(frozen=True)
class Fitted:
    input: list[Any]  # input items (`TResponseInputItem`s), as JSON-like dicts
    cut: int  # items given cut
    left_out: int  # history items left out of this request (the note's number)
    size: int  # estimated bytes of the input

    @property
    def trimmed(self) -> bool:
        return self.cut > 0 or self.left_out > 0


def note(text: str) -> TResponseInputItem:
    return cast(TResponseInputItem, {"type": "message", "role": NOTE_ROLE, "content": text})


def summary_note(summary: str) -> TResponseInputItem:
    return note(f"{SUMMARY_HEAD}\n{summary}")


def left_out_note(count: int) -> TResponseInputItem:
    return note(f"[{count} earlier message{'' if count == 1 else 's'} of this thread left out]")


def fit(
    items: Sequence[Any],
    room: int,
    *,
    summary: str | None = None,
    left_out: int = 0,
) -> Fitted:
    """`items` (the model's input) fitted into `room` estimated bytes; `summary` stands for
    the turns before them, `left_out` counts the earlier items neither summed up nor given."""
    notes, rest = _split_notes(list(items))
    for index, found in enumerate(notes):
        count = _left_out_count(found)
        if count is not None:
            left_out += count
            del notes[index]
            break
    if summary:
        notes.insert(0, summary_note(summary))
    start = run_start(rest)
    history, run = rest[:start], rest[start:]
    history, orphans = _without_orphans(history, called=_call_ids(rest))
    left_out += orphans
    share = max(room // SHARE, SMALLEST)
    preview = max(min(PREVIEW, room // 16), SMALLEST)
    plan = _Plan(notes, history, run)
    plan.cut_all_to(share)
    plan.left_out = left_out
    if plan.size() > room:
        plan.trim_outputs("history", preview, room)
    if plan.size() > room:
        plan.drop_history(room)
    for smallest in (preview, SMALLEST):  # previews first, then less
        if plan.size() > room:
            plan.trim_outputs("run", smallest, room)
        if plan.size() > room:
            plan.trim_the_rest(smallest, room)
    size = plan.size()
    if size > room:
        raise TooLarge(size, room, "the run's own messages and tool outputs, even cut down")
    return Fitted(plan.input(), plan.cut_count, plan.left_out, size)


# -- the shape of an input ------------------------------------------------------------------


def _role(item: Any) -> str | None:
    if not isinstance(item, dict) or item.get("type", "message") != "message":
        return None
    role = item.get("role")
    return role if isinstance(role, str) else None


def _is_output(item: Any) -> bool:
    kind = item.get("type") if isinstance(item, dict) else None
    return isinstance(kind, str) and kind.endswith("_output") and "call_id" in item


def _is_call(item: Any) -> bool:
    kind = item.get("type") if isinstance(item, dict) else None
    return isinstance(kind, str) and not kind.endswith("_output") and "call_id" in item


def _is_reasoning(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "reasoning"


def _call_ids(items: Sequence[Any]) -> set[str]:
    return {str(item["call_id"]) for item in items if _is_call(item)}


def _split_notes(items: list[Any]) -> tuple[list[Any], list[Any]]:
    """The notes at the head of an input (developer or system messages), and the rest."""
    count = 0
    while count < len(items) and _role(items[count]) in (NOTE_ROLE, "system"):
        count += 1
    return items[:count], items[count:]


def _left_out_count(item: Any) -> int | None:
    content = item.get("content") if isinstance(item, dict) else None
    found = _LEFT_OUT.match(content) if isinstance(content, str) else None
    return int(found.group(1)) if found else None


def run_start(items: Sequence[Any]) -> int:
    """Where the run's own items begin: at the last run of user messages (a run starts with
    its messages and only then do they come), moved back to any call (and the reasoning
    before it) that an output after it answers. 0 (all of it) when there is no user
    message."""
    users = [index for index, item in enumerate(items) if _role(item) == "user"]
    if not users:
        return 0
    start = users[-1]
    while start > 0 and _role(items[start - 1]) == "user":
        start -= 1
    answered = {str(item["call_id"]) for item in items[start:] if _is_output(item)}
    for index in range(start):
        if _is_call(items[index]) and str(items[index]["call_id"]) in answered:
            start = index
            break
    while start > 0 and _is_reasoning(items[start - 1]):
        start -= 1
    return start


def _without_orphans(history: list[Any], called: set[str]) -> tuple[list[Any], int]:
    kept = [i for i in history if not (_is_output(i) and str(i["call_id"]) not in called)]
    return kept, len(history) - len(kept)


def groups(items: Sequence[Any]) -> list[tuple[int, int]]:
    """The spans [start, end) of `items` that go together: a call with its output (calls
    made together, until their outputs have all come), a reasoning item with what follows."""
    answered = {str(item["call_id"]) for item in items if _is_output(item)}
    spans: list[tuple[int, int]] = []
    start = 0
    waiting: set[str] = set()
    for index, item in enumerate(items):
        if index > start and not waiting and not _is_reasoning(items[index - 1]):
            spans.append((start, index))
            start = index
        if _is_call(item) and str(item["call_id"]) in answered:
            waiting.add(str(item["call_id"]))
        elif _is_output(item):
            waiting.discard(str(item["call_id"]))
    if items:
        spans.append((start, len(items)))
    return spans


# -- cutting ---------------------------------------------------------------------------


def _what(item: Any) -> str:
    return "this tool's output" if _is_output(item) else "this message"


def cut_text(text: str, keep_bytes: int, what: str) -> str:
    """Head and tail of `text` within about `keep_bytes`, with a line saying what was left."""
    size = text_size(text)
    if size <= keep_bytes:
        return text
    keep = max(int(len(text) * keep_bytes / size), 0)
    head, tail = keep - keep // 3, keep // 3
    omitted = len(text) - head - tail
    line = f"[… {omitted:,} characters of {what} left out]"
    return f"{text[:head]}\n{line}\n{text[len(text) - tail :]}"


def _slots(item: Any) -> list[tuple[Any, Any, str]]:
    """The texts of an item that may be cut: (container, key, what it is)."""
    what = _what(item)
    found: list[tuple[Any, Any, str]] = []
    for key in ("content", "output"):
        value = item.get(key)
        if isinstance(value, str):
            found.append((item, key, what))
        elif isinstance(value, list):
            for index, part in enumerate(value):
                if isinstance(part, dict):
                    if isinstance(part.get("text"), str):
                        found.append((part, "text", what))
                    elif part.get("type") in ("input_file", "input_image"):
                        found.append((value, index, "this file"))
    return found


def cut_item(item: Any, limit: int) -> Any:
    """A copy of `item` cut down to about `limit` bytes (the item itself when it fits, or
    when nothing of it can be cut: a call's arguments, reasoning)."""
    size = item_size(item)
    if size <= limit or not isinstance(item, dict):
        return item
    cut = copy.deepcopy(item)
    over = size - limit
    slots = sorted(_slots(cut), key=lambda slot: -_slot_size(slot))
    for container, key, what in slots:
        if over <= 0:
            break
        before = _slot_size((container, key, what))
        value = container[key]
        if isinstance(value, dict):  # a file or an image part
            container[key] = _file_cut(value, max(before - over, SMALLEST))
        else:
            container[key] = cut_text(value, max(before - over - 80, SMALLEST), what)
        over -= before - _slot_size((container, key, what))
    return cut if over < size - limit else item


def _slot_size(slot: tuple[Any, Any, str]) -> int:
    value = slot[0][slot[1]]
    return item_size(value) if isinstance(value, dict) else text_size(value)


def _file_cut(part: dict[str, Any], keep_bytes: int) -> dict[str, Any]:
    """A text file's text, cut; any other file (an image, a PDF) left out, with a line."""
    import base64

    name = part.get("filename") or "an image"
    data = part.get("file_data")
    found = _TEXT_FILE.match(data) if isinstance(data, str) else None
    if found is not None:
        assert isinstance(data, str)
        try:
            text = base64.b64decode(data[found.end() :]).decode("utf-8")
        except ValueError:
            text = None
        if text is not None:
            kept = cut_text(text, keep_bytes, "this file")
            return {"type": "input_text", "text": f"[file {name}, cut to fit]\n{kept}"}
    return {"type": "input_text", "text": f"[file {name} left out: too large for this request]"}


# -- the plan --------------------------------------------------------------------------


class _Plan:
    """The request being fitted: notes, history, run, and their sizes."""

    def __init__(self, notes: list[Any], history: list[Any], run: list[Any]) -> None:
        self.notes = notes
        self.history = history
        self.run = run
        self.sizes = {
            key: [item_size(i) for i in items]
            for key, items in (("notes", notes), ("history", history), ("run", run))
        }
        self.cut_count = 0
        self.left_out = 0
        self.copies: set[int] = set()  # items this plan made by cutting

    def size(self) -> int:
        total = sum(sum(sizes) for sizes in self.sizes.values())
        if self.left_out:
            total += item_size(left_out_note(self.left_out))
        return total

    def input(self) -> list[Any]:
        marker = [left_out_note(self.left_out)] if self.left_out else []
        return [*self.notes, *marker, *self.history, *self.run]

    def _replace(self, part: str, index: int, limit: int) -> None:
        """Cut one item down to `limit` (counted once, however often it is cut)."""
        items = getattr(self, part)
        cut = cut_item(items[index], limit)
        if cut is items[index]:
            return
        if id(items[index]) not in self.copies:
            self.cut_count += 1
        items[index] = cut
        self.copies.add(id(cut))
        self.sizes[part][index] = item_size(cut)

    def cut_all_to(self, share: int) -> None:
        for part in ("notes", "history", "run"):
            for index, size in enumerate(self.sizes[part]):
                if size > share:
                    self._replace(part, index, share)

    def trim_outputs(self, part: str, preview: int, room: int) -> None:
        """Cut the tool outputs of `part` ("history" or "run") to `preview`, oldest first,
        until the request fits `room`."""
        for index, item in enumerate(getattr(self, part)):
            if self.size() <= room:
                return
            if _is_output(item) and self.sizes[part][index] > preview:
                self._replace(part, index, preview)

    def drop_history(self, room: int) -> None:
        """Keep the newest whole groups that fit; leave the older ones out."""
        sizes = self.sizes["history"]
        most = self.left_out + len(self.history)
        other = sum(self.sizes["notes"]) + sum(self.sizes["run"])
        other += item_size(left_out_note(most)) if most else 0
        kept_from, kept = len(self.history), 0
        for start, end in reversed(groups(self.history)):
            span = sum(sizes[start:end])
            if other + kept + span > room:
                break
            kept, kept_from = kept + span, start
        self.left_out += kept_from
        del self.history[:kept_from]
        del sizes[:kept_from]

    def trim_the_rest(self, preview: int, room: int) -> None:
        """The summary, then the run's items, oldest first."""
        for part in ("notes", "run"):
            for index in range(len(getattr(self, part))):
                if self.size() <= room:
                    return
                if self.sizes[part][index] > preview:
                    self._replace(part, index, preview)
