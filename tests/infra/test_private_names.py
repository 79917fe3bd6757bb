"""Tests and their kit use production code through its public names: a private name (one
leading underscore) defined in `bot/` or `storage/` is not reached from `tests/`, `testkit/`
or `bench/`, so production code can change its insides without breaking them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ("bot", "storage")
USERS = ("tests", "testkit", "bench")
OWN_SIDE = {"self", "cls"}  # a class of the kit using its own private members


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_private_names() -> set[str]:
    names: set[str] = set()
    for folder in PRODUCTION:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    name = node.name
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    name = node.attr
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    name = node.id
                else:
                    continue
                if _private(name):
                    names.add(name)
    return names


def _reached(path: Path, private: set[str]) -> list[str]:
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in private:
            if isinstance(node.value, ast.Name) and node.value.id in OWN_SIDE:
                continue
            found.append(f"{shown}:{getattr(node, 'lineno', 0)} .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PRODUCTION:
            found += [
                f"{shown}:{getattr(node, 'lineno', 0)} import {alias.name}"
                for alias in node.names
                if _private(alias.name)
            ]
    return found


def test_no_test_reaches_a_private_name_of_production_code() -> None:
    private = _defined_private_names()
    found = [
        hit
        for folder in USERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        for hit in _reached(path, private)
    ]
    assert found == []


def test_the_check_sees_a_reach_in(tmp_path: Path) -> None:
    """The scan above would catch the crash child's old `store._put_blob` wrapping."""
    sample = tmp_path / "sample.py"
    sample.write_text("def wrap(store):\n    store._put_blob = print\n    self._own = 1\n")
    assert _reached(sample, {"_put_blob", "_own"}) == [f"{sample}:2 ._put_blob"]
