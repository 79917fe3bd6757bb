"""Slack's Markdown (`markdown_text`, the `markdown` block, streamed text), parsed for the local
page into plain nodes that the page turns into DOM nodes with `textContent` only: whatever a
message says, it never becomes HTML.

Blocks: `{"p": spans}`, `{"h": spans}`, `{"pre": text}`, `{"ul": [spans, ...]}`,
`{"ol": [spans, ...], "start": n}`, `{"hr": true}`. Spans: a string (text), `{"b": spans}`,
`{"i": spans}`, `{"s": spans}`, `{"code": text}`, `{"a": spans, "href": "https://..."}`.

A subset, as Slack renders it for an LLM's answer: paragraphs, headings, lists (nested ones
flattened), fenced code, bold, italic, strike-through, inline code, http(s) links. Backslash
escapes (`\\[`) and the entities `&lt; &gt; &amp; &quot; &#39;` show as the characters, which
is what the bot's escaping relies on. Text being streamed is parsed as it stands: a code
fence not closed yet runs to the end, an unclosed `**` shows as written."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

Span = str | dict[str, Any]
PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
ENTITIES = {"&lt;": "<", "&gt;": ">", "&amp;": "&", "&quot;": '"', "&#39;": "'"}
ENTITY = re.compile(r"&(?:lt|gt|amp|quot|#39);")
LINK = re.compile(r"\[([^\[\]\n]*)\]\((https?://[^\s()<>]+)\)", re.IGNORECASE)
EMPHASIS = (("**", "b"), ("__", "b"), ("~~", "s"), ("*", "i"), ("_", "i"))
FENCE = re.compile(r"^ {0,3}(`{3,})[^`]*$")
ITEM = re.compile(r"^\s*(?:([-*+])|(\d{1,9})[.)])(?:\s+(.*))?$")
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")
RULE = re.compile(r"^ {0,3}([-*_])(?:\s*\1){2,}\s*$")
MAX_NESTING = 6  # spans inside spans; deeper delimiters show as written


@lru_cache(maxsize=512)
def markdown(text: str) -> list[dict[str, Any]]:
    """The blocks of `text` (cached: the page asks for the same messages again and again;
    callers must not change what they get)."""
    lines = text.split("\n")
    blocks: list[dict[str, Any]] = []
    paragraph: list[str] = []

    def end_paragraph() -> None:
        if paragraph:
            blocks.append({"p": inline("\n".join(paragraph))})
            paragraph.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence or not line.strip() or RULE.match(line) or ITEM.match(line):
            end_paragraph()
        if fence:
            i = _code(lines, i + 1, len(fence.group(1)), blocks)
        elif not line.strip():
            i += 1
        elif RULE.match(line):
            blocks.append({"hr": True})
            i += 1
        elif heading := HEADING.match(line):
            end_paragraph()
            blocks.append({"h": inline(heading.group(1))})
            i += 1
        elif ITEM.match(line):
            i = _list(lines, i, blocks)
        else:
            paragraph.append(line)
            i += 1
    end_paragraph()
    return blocks


def _code(lines: list[str], i: int, ticks: int, blocks: list[dict[str, Any]]) -> int:
    """A fenced block from line `i` to its closing fence (or the end, while streaming)."""
    closing = re.compile(rf"^ {{0,3}}`{{{ticks},}}\s*$")
    body: list[str] = []
    while i < len(lines) and not closing.match(lines[i]):
        body.append(lines[i])
        i += 1
    blocks.append({"pre": "\n".join(body)})
    return i + 1


def _list(lines: list[str], i: int, blocks: list[dict[str, Any]]) -> int:
    """Consecutive items of one kind; indented lines continue the item above them."""
    first = ITEM.match(lines[i])
    assert first is not None
    ordered = first.group(2) is not None
    items: list[list[str]] = []
    while i < len(lines):
        item = ITEM.match(lines[i])
        if item and (item.group(2) is not None) == ordered and not RULE.match(lines[i]):
            items.append([item.group(3) or ""])
        elif not item and items and lines[i].strip() and lines[i][:1].isspace():
            items[-1].append(lines[i].strip())
        else:
            break
        i += 1
    spans = [inline("\n".join(parts)) for parts in items]
    if ordered:
        start = int(first.group(2))
        blocks.append({"ol": spans, **({"start": start} if start != 1 else {})})
    else:
        blocks.append({"ul": spans})
    return i


def inline(text: str) -> list[Span]:
    return _Inline(text).spans(0, len(text))


class _Inline:
    """Spans of one paragraph. A delimiter with no closing one after it shows as written;
    such failures are remembered, so that text full of lone `*` stays linear."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.no_closing: dict[str, int] = {}  # delimiter -> a start from which none closes

    def spans(self, start: int, end: int, depth: int = 0) -> list[Span]:
        text = self.text
        out: list[Span] = []
        plain: list[str] = []

        def add(span: Span) -> None:
            if plain:
                out.append("".join(plain))
                plain.clear()
            out.append(span)

        i = start
        while i < end:
            char = text[i]
            if char == "\\" and i + 1 < end and text[i + 1] in PUNCTUATION:
                plain.append(text[i + 1])
                i += 2
            elif char == "&" and (entity := ENTITY.match(text, i, end)):
                plain.append(ENTITIES[entity.group()])
                i = entity.end()
            elif char == "`":
                run = _run_end(text, i, end) - i
                close = self._closing_run(i + run, end, run)
                if close is None:
                    plain.append(text[i : i + run])
                    i += run
                else:
                    add({"code": _code_text(text[i + run : close])})
                    i = close + run
            elif depth >= MAX_NESTING:
                plain.append(char)
                i += 1
            elif char == "[" and (link := LINK.match(text, i, end)):
                label = self.spans(link.start(1), link.end(1), depth + 1)
                add({"a": label, "href": link.group(2)})
                i = link.end()
            elif found := self._emphasis(i, end):
                kind, inner, close, after = found
                add({kind: self.spans(inner, close, depth + 1)})
                i = after
            else:
                plain.append(char)
                i += 1
        if plain:
            out.append("".join(plain))
        return out

    def _emphasis(self, i: int, end: int) -> tuple[str, int, int, int] | None:
        """(kind, where the inner text starts and ends, where the closing delimiter ends)
        for a delimiter opening at `i`, or None."""
        text = self.text
        for delim, kind in EMPHASIS:
            if not text.startswith(delim, i):
                continue
            inner = i + len(delim)
            if inner >= end or text[inner].isspace():
                continue
            if delim[0] == "_" and i > 0 and text[i - 1].isalnum():
                return None  # snake_case is not emphasis
            close = self._closing(delim, inner, end)
            if close is None:
                continue
            after = close + len(delim)
            if delim[0] == "_" and after < end and text[after].isalnum():
                continue
            return kind, inner, close, after
        return None

    def _closing(self, delim: str, start: int, end: int) -> int | None:
        key = f"{delim}:{end}"
        if self.no_closing.get(key, end + 1) <= start:
            return None
        text = self.text
        j = start
        while j < end:
            char = text[j]
            if char == "\\":
                j += 2
            elif char == "`":
                run = _run_end(text, j, end) - j
                close = self._closing_run(j + run, end, run)
                j = j + run if close is None else close + run
            elif char == delim[0]:
                run_end = _run_end(text, j, end)
                closes = j > start and not text[j - 1].isspace()
                if len(delim) == 1 and run_end - j == 2:
                    nested = self._closing(delim * 2, j + 2, end)  # bold inside italic
                    if nested is not None:
                        j = nested + 2
                        continue
                if closes and run_end - j >= len(delim):
                    return j
                j = run_end
            else:
                j += 1
        self.no_closing[key] = start
        return None

    def _closing_run(self, start: int, end: int, run: int) -> int | None:
        """Where the next run of exactly `run` backticks starts."""
        key = f"`{run}:{end}"
        if self.no_closing.get(key, end + 1) <= start:
            return None
        j = self.text.find("`", start, end)
        while j != -1:
            after = _run_end(self.text, j, end)
            if after - j == run:
                return j
            j = self.text.find("`", after, end)
        self.no_closing[key] = start
        return None


def _run_end(text: str, i: int, end: int) -> int:
    char = text[i]
    while i < end and text[i] == char:
        i += 1
    return i


def _code_text(code: str) -> str:
    """Inline code as written; one space either side is padding (CommonMark)."""
    if len(code) > 2 and code[0] == code[-1] == " " and code.strip():
        return code[1:-1]
    return code
