"""The house's layering, read off the source: data flows Slack layer -> runtime -> storage,
the runtime is reached only through its package, its modules import one another without a
circle, storage is reached from async code only through its one bridge, no module grows
past a ceiling that still holds one class whole (`LIMIT`), and tests reach no private name
of production code."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "bot" / "runtime"
# Lines per module in the rooms below: room for one class in one file (the SDK's core modules
# run to a median of about 490 lines), not a cap that splits a class across several.
LIMIT = 900
ROOMS = ("bot", "storage", "bench", "testkit")


def sources(*folders: str) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def imported(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for each import in `path`; `from a import b` gives `a.b` as well as
    `a`, so a submodule reached through its package is seen."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}"


def test_storage_knows_nothing_of_the_bot() -> None:
    found = [
        where(path, line)
        for path in sources("storage")
        for line, module in imported(path)
        if module == "bot" or module.startswith("bot.")
    ]
    assert found == []


def test_the_runtime_knows_nothing_of_slack() -> None:
    slack = ("slack_bolt", "slack_sdk", "bot.slackapp", "bot.standin")
    found = [
        where(path, line)
        for path in sources("bot/runtime")
        for line, module in imported(path)
        if module.split(".")[0] in slack or module.startswith(slack)
    ]
    assert found == []


def test_nothing_outside_the_runtime_imports_its_modules() -> None:
    """`bot/runtime/__init__.py` is the runtime's public face; its modules are its own
    (the runtime's own unit tests, in tests/runtime, may read them)."""
    modules = {path.stem for path in RUNTIME.glob("*.py")} - {"__init__"}
    public = set(_exported())
    found = [
        f"{where(path, getattr(node, 'lineno', 0))} {ast.unparse(node)}"
        for path in sources("bot", "bench", "testkit", "tests", "examples")
        if RUNTIME not in path.parents and ROOT / "tests" / "runtime" not in path.parents
        for node in ast.walk(ast.parse(path.read_text()))
        if _reaches_inside(node, modules, public)
    ]
    assert found == []


def _reaches_inside(node: ast.AST, modules: set[str], public: set[str]) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name.startswith("bot.runtime.") for alias in node.names)
    if not isinstance(node, ast.ImportFrom) or node.level != 0 or node.module is None:
        return False
    if node.module.startswith("bot.runtime."):
        return True
    return node.module == "bot.runtime" and any(
        alias.name in modules and alias.name not in public for alias in node.names
    )


def _exported() -> list[str]:
    tree = ast.parse((RUNTIME / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return [ast.literal_eval(item) for item in node.value.elts]  # type: ignore[attr-defined]
    raise AssertionError("bot/runtime/__init__.py has no __all__")


def test_the_runtime_modules_import_one_another_without_a_circle() -> None:
    """Type-only imports (under `if TYPE_CHECKING:`) count too: a part that calls another is
    given it, and what a part decides for its caller is returned to it, so no module needs
    the one that calls it."""
    modules = {path.stem for path in RUNTIME.glob("*.py")} - {"__init__"}
    edges = {module: _runtime_imports(RUNTIME / f"{module}.py", modules) for module in modules}
    assert [sorted(part) for part in _circles(edges)] == []


def _runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of bot/runtime that `path` imports (`bot.runtime.x`, `from bot.runtime
    import x`), wherever the import is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("bot.runtime."):
                found.add(node.module.split(".")[2])
            elif node.module == "bot.runtime":
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(
                alias.name.split(".")[2]
                for alias in node.names
                if alias.name.startswith("bot.runtime.")
            )
    return found & modules


def _circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan), and any module
    that imports itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(edges[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            part: set[str] = set()
            while not part or module not in part:
                part.add(member := stack.pop())
                on_stack.discard(member)
            if len(part) > 1 or module in edges[module]:
                found.append(part)

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_async_code_reaches_storage_through_one_bridge() -> None:
    """Sync storage calls from async code go through storage.calls (its pools, retries and
    error policy), never a bare thread hop of their own."""
    found = [
        where(path, node.lineno)
        for path in sources("bot/runtime", "storage")
        if path != ROOT / "storage" / "calls.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr in ("to_thread", "run_in_executor")
    ]
    assert found == []


def test_no_room_is_over_the_limit() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sources(*ROOMS)
        if (lines := len(path.read_text().splitlines())) > LIMIT
    }
    assert found == {}


# -- tests use production code through its public names ---------------------------------

PRODUCTION = ("bot", "storage")
USERS = ("tests", "testkit", "bench")
OWN_SIDE = {"self", "cls"}  # a class of the kit using its own private members


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_private_names() -> set[str]:
    names: set[str] = set()
    for path in sources(*PRODUCTION):
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
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and node.attr in private:
            if not (isinstance(node.value, ast.Name) and node.value.id in OWN_SIDE):
                found.append(f"{where(path, line)} .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PRODUCTION:
            found += [
                f"{where(path, line)} import {alias.name}"
                for alias in node.names
                if _private(alias.name)
            ]
    return found


def test_no_test_reaches_a_private_name_of_production_code() -> None:
    """A private name (one leading underscore) defined in `bot/` or `storage/` is not
    reached from `tests/`, `testkit/` or `bench/`: production code can change its insides
    without breaking them."""
    private = _defined_private_names()
    found = [hit for path in sources(*USERS) for hit in _reached(path, private)]
    assert found == []


def test_the_private_name_check_sees_a_reach_in(tmp_path: Path) -> None:
    """The scan above would catch the crash child's old `store._put_blob` wrapping."""
    sample = tmp_path / "sample.py"
    sample.write_text("def wrap(store):\n    store._put_blob = print\n    self._own = 1\n")
    assert _reached(sample, {"_put_blob", "_own"}) == [f"{sample}:2 ._put_blob"]
