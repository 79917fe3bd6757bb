"""Model output rendered as Markdown (`markdown_text`, the `markdown` block), made safe.

In Slack's Markdown, `<!channel>`, `<@U123>` and `<url|label>` are literal text, but a Markdown
link `[label](url)` shows only its label: a disguised link. So, outside code, `[`, `]` are
backslash-escaped (a link shows as its raw text, URL included) and `&`, `<`, `>` become
entities (rendered as the characters themselves, never parsed); code spans and fenced
blocks are left as written (they render literally). The escaper is incremental: streamed
text arrives in pieces, and a backtick run cut in two by a piece boundary is held back
until the next piece decides it."""

from __future__ import annotations

ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "\\[", "]": "\\]"}
MARKDOWN_LIMIT = 12_000  # characters of Markdown in one message


class MarkdownEscaper:
    def __init__(self) -> None:
        self.fenced = False  # inside ``` ... ```
        self.inline = False  # inside ` ... `
        self.pending = ""  # a trailing run of backticks, not yet decided

    def feed(self, text: str) -> str:
        """The safe rendering of `text`, continuing from what came before."""
        out: list[str] = []
        text = self.pending + text
        self.pending = ""
        i = 0
        while i < len(text):
            char = text[i]
            if char == "`":
                end = i
                while end < len(text) and text[end] == "`":
                    end += 1
                if end == len(text):  # the run may go on in the next piece
                    self.pending = text[i:]
                    break
                self._backticks(end - i)
                out.append(text[i:end])
                i = end
                continue
            if self.fenced or self.inline:
                out.append(char)
            else:
                out.append(ESCAPES.get(char, char))
            i += 1
        return "".join(out)

    def flush(self) -> str:
        """What is held back, at the end of the text."""
        rest, self.pending = self.pending, ""
        if rest:
            self._backticks(len(rest))
        return rest

    def _backticks(self, run: int) -> None:
        if run >= 3:
            if not self.inline:
                self.fenced = not self.fenced
        elif not self.fenced:
            self.inline = not self.inline


def safe_markdown(text: str) -> str:
    escaper = MarkdownEscaper()
    return escaper.feed(text) + escaper.flush()


def split_markdown(text: str, limit: int = MARKDOWN_LIMIT) -> list[str]:
    """Pieces within `limit`, cut at paragraph or line ends (a cut inside a code block closes
    and reopens it, so each piece renders on its own)."""
    pieces: list[str] = []
    rest = text
    while len(rest) > limit:
        cut = rest.rfind("\n\n", 0, limit)
        if cut <= limit // 2:
            cut = rest.rfind("\n", 0, limit)
        if cut <= limit // 2:
            cut = limit - 8
        head, rest = rest[:cut], rest[cut:].lstrip("\n")
        if head.count("```") % 2:  # inside a fence: close here, reopen in the next piece
            head += "\n```"
            rest = "```\n" + rest
        pieces.append(head)
    pieces.append(rest)
    return [piece for piece in pieces if piece.strip()] or [""]
