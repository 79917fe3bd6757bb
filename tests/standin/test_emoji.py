"""Every emoji shortcode the bot writes (in its messages' text and blocks, and as reactions)
is one local mode's page draws: read off the bot's source, so a new notice with a new code
fails here until the page's table (`bot.standin.emoji`) has it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from bot.standin.emoji import SHORTCODES, shortcodes_script
from testkit.services import ROOT

CODE = re.compile(r"(?<![\w:/]):([a-z][a-z0-9_+-]*):(?![\w/])")
REACTIONS = ("reactions_add", "reactions_remove")


def fstring_text(node: ast.JoinedStr) -> str:
    """An f-string's text with a word in place of each value: `f"a:{team}:stop:{user}"` (an
    id, not an emoji) is not taken for `:stop:`."""
    return "".join(
        str(part.value) if isinstance(part, ast.Constant) else "x" for part in node.values
    )


def bot_shortcodes() -> set[str]:
    """The codes in the string literals of the bot (not of local mode's stand-in), and the
    names it reacts with."""
    found: set[str] = set()
    for path in sorted((ROOT / "bot").rglob("*.py")):
        if "standin" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_fstrings = {
            id(part)
            for node in ast.walk(tree)
            if isinstance(node, ast.JoinedStr)
            for part in node.values
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                found.update(CODE.findall(fstring_text(node)))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) not in in_fstrings:
                    found.update(CODE.findall(node.value))
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") in REACTIONS:
                found.update(
                    str(k.value.value)
                    for k in node.keywords
                    if k.arg == "name" and isinstance(k.value, ast.Constant)
                )
    return found


def test_every_shortcode_the_bot_writes_is_drawn() -> None:
    written = bot_shortcodes()
    assert {"repeat", "heavy_minus_sign", "warning", "eyes"} <= written  # the scan finds them
    assert sorted(written - SHORTCODES.keys()) == []


def test_the_table_cannot_end_the_pages_script() -> None:
    assert "<" not in shortcodes_script()
    assert Path(ROOT / "bot/standin/page.html").read_text().count("{{EMOJI}}") == 1
